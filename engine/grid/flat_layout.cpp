#include "engine/grid/flat_layout.h"

#include <algorithm>
#include <stdexcept>

namespace ferry {

FlatRange FlatRange::intersect(const FlatRange& other) const {
  const FlatRange result{std::max(begin, other.begin), std::min(end, other.end)};
  return result.empty() ? FlatRange{result.begin, result.begin} : result;
}

FlatLayout::FlatLayout(std::vector<std::int64_t> sizes, int ranks) : sizes_(std::move(sizes)), ranks_(ranks) {
  if (ranks < 1) throw std::invalid_argument("a flat layout needs at least one rank, got " + std::to_string(ranks));
  for (const std::int64_t size : sizes_) {
    if (size < 0) throw std::invalid_argument("a parameter of " + std::to_string(size) + " elements");
    offsets_.push_back(total_);
    total_ += size;
  }
  const std::int64_t share = (total_ + ranks - 1) / ranks;
  partition_ = (share + kPartitionAlignment - 1) / kPartitionAlignment * kPartitionAlignment;
}

FlatRange FlatLayout::partition(int rank) const {
  if (rank < 0 || rank >= ranks_) {
    throw std::out_of_range("rank " + std::to_string(rank) + " of a layout over " + std::to_string(ranks_) + " ranks");
  }
  // Ranks past the end hold padding only: an empty range at the end.
  return {std::min(partition_ * rank, total_), std::min(partition_ * (rank + 1), total_)};
}

std::vector<std::size_t> FlatLayout::owned_counts(const FlatRange& range) const {
  std::vector<std::size_t> counts;
  for (int rank = 0; rank < ranks_; ++rank) counts.push_back(static_cast<std::size_t>(range.intersect(partition(rank)).size()));
  return counts;
}

std::vector<GradientBucket> FlatLayout::buckets(std::int64_t bucket_elements, const std::vector<std::size_t>& group_starts) const {
  std::vector<bool> starts(sizes_.size() + 1, false);
  for (const std::size_t position : group_starts) {
    if (position < starts.size()) starts[position] = true;
  }
  std::vector<GradientBucket> result;
  std::size_t end = sizes_.size();  // one past the bucket's last parameter
  while (end > 0) {
    std::size_t first = end - 1;
    std::int64_t elements = sizes_[first];
    while (first > 0 && !starts[first] && (bucket_elements == 0 || elements + sizes_[first - 1] <= bucket_elements)) {
      elements += sizes_[--first];
    }
    result.push_back({first, end - 1, {offsets_[first], offsets_[end - 1] + sizes_[end - 1]}});
    end = first;
  }
  return result;
}

std::vector<FlatRange> FlatLayout::chunks(std::int64_t elements) const {
  std::vector<FlatRange> result;
  const std::int64_t step = elements > 0 ? elements : std::max<std::int64_t>(total_, 1);
  for (std::int64_t begin = 0; begin < total_; begin += step) result.push_back({begin, std::min(total_, begin + step)});
  return result;
}

}  // namespace ferry
