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

std::size_t FlatLayout::position_of_element(std::int64_t element) const {
  if (element < 0 || element >= total_) {
    throw std::out_of_range("flat element " + std::to_string(element) + " of a layout of " + std::to_string(total_));
  }
  // The last parameter starting at or before the element (empty parameters start where the next does).
  const auto after = std::upper_bound(offsets_.begin(), offsets_.end(), element);
  std::size_t position = static_cast<std::size_t>(after - offsets_.begin()) - 1;
  while (sizes_[position] == 0) --position;
  return position;
}

std::vector<GradientBucket> FlatLayout::buckets(std::int64_t bucket_elements, const std::vector<std::size_t>& group_starts,
                                                const std::vector<std::size_t>& uncut) const {
  std::vector<bool> starts(sizes_.size() + 1, false), whole(sizes_.size(), false);
  for (const std::size_t position : group_starts) {
    if (position < starts.size()) starts[position] = true;
  }
  for (const std::size_t position : uncut) {
    if (position >= sizes_.size()) continue;
    whole[position] = starts[position] = starts[position + 1] = true;
  }
  std::vector<GradientBucket> result;
  auto add = [&](std::int64_t begin, std::int64_t end) {
    if (end > begin) result.push_back({position_of_element(begin), position_of_element(end - 1), {begin, end}});
  };
  std::size_t group = 0;
  while (group < sizes_.size()) {
    std::size_t end = group + 1;  // one past the group's last parameter
    while (end < sizes_.size() && !starts[end]) ++end;
    const std::int64_t begin = offsets_[group], finish = offsets_[end - 1] + sizes_[end - 1];
    if (whole[group] || bucket_elements == 0) {
      add(begin, finish);
    } else {
      const std::int64_t size = finish - begin, remainder = size % bucket_elements;
      if (remainder > 0) add(begin, begin + remainder);
      for (std::int64_t cut = begin + remainder; cut < finish; cut += bucket_elements) add(cut, cut + bucket_elements);
    }
    group = end;
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
