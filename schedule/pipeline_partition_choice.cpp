#include "schedule/pipeline_partition_choice.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ferry {
namespace {

// A rank that did not fit, with the blocks of each of its chunks.
struct RankOverLimit {
  std::int32_t rank = 0;
  std::vector<StageBlocks> chunks;
};

std::vector<StageBlocks> chunks_of(const std::vector<StageBlocks>& split, std::int32_t rank, std::int32_t ranks) {
  std::vector<StageBlocks> chunks;
  for (std::size_t stage = static_cast<std::size_t>(rank); stage < split.size(); stage += static_cast<std::size_t>(ranks)) {
    chunks.push_back(split[stage]);
  }
  return chunks;
}

// `split` gives the rank every block (chunk by chunk) it held when it did not fit.
bool holds_at_least(const std::vector<StageBlocks>& split, const RankOverLimit& over, std::int32_t ranks) {
  const std::vector<StageBlocks> chunks = chunks_of(split, over.rank, ranks);
  return std::equal(chunks.begin(), chunks.end(), over.chunks.begin(), over.chunks.end(),
                    [](const StageBlocks& now, const StageBlocks& then) { return now.first <= then.first && now.end >= then.end; });
}

std::int64_t fullest(const std::vector<std::int64_t>& peaks) { return *std::max_element(peaks.begin(), peaks.end()); }

}  // namespace

PartitionChoice choose_pipeline_partition(const std::vector<std::vector<StageBlocks>>& candidates, std::int32_t ranks,
                                          std::int64_t memory_limit, const RankPeaksOf& peaks_of, std::size_t max_measured) {
  if (candidates.empty() || max_measured == 0) throw std::invalid_argument("no pipeline split to choose from (none given, or none may be measured)");
  std::vector<RankOverLimit> over_limit;
  PartitionChoice least;  // the measured split whose fullest rank needs the least
  std::size_t skipped = 0;
  for (const std::vector<StageBlocks>& split : candidates) {
    if (least.measured == max_measured) break;
    if (std::any_of(over_limit.begin(), over_limit.end(), [&](const RankOverLimit& over) { return holds_at_least(split, over, ranks); })) {
      ++skipped;
      continue;
    }
    const std::vector<std::int64_t> peaks = peaks_of(split);
    if (peaks.size() != static_cast<std::size_t>(ranks)) {
      throw std::invalid_argument("a pipeline split's measure has " + std::to_string(peaks.size()) + " ranks, expected " + std::to_string(ranks));
    }
    const std::size_t measured = least.measured + 1;
    if (fullest(peaks) <= memory_limit) return {split, peaks, true, measured, skipped};
    if (least.rank_peaks.empty() || fullest(peaks) < fullest(least.rank_peaks)) least = {split, peaks, false, 0, 0};
    least.measured = measured;
    for (std::int32_t rank = 0; rank < ranks; ++rank) {
      if (peaks[static_cast<std::size_t>(rank)] > memory_limit) over_limit.push_back({rank, chunks_of(split, rank, ranks)});
    }
  }
  least.skipped = skipped;
  return least;
}

}  // namespace ferry
