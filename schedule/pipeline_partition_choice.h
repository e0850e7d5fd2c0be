// Chooses a pipeline's block split by memory as well as cost: of the contiguous splits, cheapest first,
// the first whose every rank's measured peak fits the device; when none does, the one whose fullest
// rank needs the least. The measure (a dry run of every stage) is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "schedule/pipeline_partition.h"

namespace ferry {

// Each rank's peak bytes with `split` (rank r holds stages r, r + ranks, ...).
using RankPeaksOf = std::function<std::vector<std::int64_t>(const std::vector<StageBlocks>& split)>;

struct PartitionChoice {
  std::vector<StageBlocks> split;
  std::vector<std::int64_t> rank_peaks;  // [rank], the measure of `split`
  bool fits = false;                     // every rank's peak is within the limit
  std::size_t measured = 0;              // splits measured
  std::size_t skipped = 0;               // splits not measured: a rank holds all a rank that did not fit held
};

// `candidates`: cheapest first (pipeline_partitions_by_cost), at least one. Measures them in order until
// one fits, at most `max_measured` of them; skips a split in which some rank holds, chunk by chunk, at
// least the blocks it held in a measured split where it did not fit (a rank holding more blocks needs
// no less memory). Throws std::invalid_argument when there is no candidate, max_measured is 0, or a
// measure has the wrong number of ranks.
PartitionChoice choose_pipeline_partition(const std::vector<std::vector<StageBlocks>>& candidates, std::int32_t ranks,
                                          std::int64_t memory_limit, const RankPeaksOf& peaks_of, std::size_t max_measured);

}  // namespace ferry
