#include "engine/grid/flat_layout.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>

namespace ferry {

FlatRange FlatRange::intersect(const FlatRange& other) const {
  const FlatRange result{std::max(begin, other.begin), std::min(end, other.end)};
  return result.empty() ? FlatRange{result.begin, result.begin} : result;
}

FlatShards::FlatShards(FlatRange range) : FlatShards(std::vector<FlatRange>{range}) {}

FlatShards::FlatShards(std::vector<FlatRange> ranges) {
  for (const FlatRange& range : ranges) {
    if (range.empty()) continue;
    if (!ranges_.empty() && range.begin < ranges_.back().end) {
      throw std::invalid_argument("flat ranges must be increasing and disjoint: [" + std::to_string(range.begin) + ", " +
                                  std::to_string(range.end) + ") after one ending at " + std::to_string(ranges_.back().end));
    }
    ranges_.push_back(range);
    offsets_.push_back(size_);
    size_ += range.size();
  }
}

FlatRange FlatShards::intersect(const FlatRange& range) const {
  // The first held range ending after range.begin; the next one must start at or after range.end.
  const auto first = std::upper_bound(ranges_.begin(), ranges_.end(), range.begin,
                                      [](std::int64_t element, const FlatRange& held) { return element < held.end; });
  if (first == ranges_.end()) return {range.begin, range.begin};
  if (std::next(first) != ranges_.end() && std::next(first)->begin < range.end && !range.intersect(*first).empty()) {
    throw std::logic_error("flat elements [" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ") meet two shards ([" +
                           std::to_string(first->begin) + ", " + std::to_string(first->end) + ") and the next): a range must lie in one unit");
  }
  return range.intersect(*first);
}

std::int64_t FlatShards::offset(std::int64_t element) const {
  const auto held = std::upper_bound(ranges_.begin(), ranges_.end(), element,
                                     [](std::int64_t value, const FlatRange& range) { return value < range.end; });
  if (held == ranges_.end() || held->begin > element) {
    throw std::out_of_range("flat element " + std::to_string(element) + " is not among the " + std::to_string(size_) + " held");
  }
  return offsets_[static_cast<std::size_t>(held - ranges_.begin())] + (element - held->begin);
}

bool FlatShards::holds(const FlatRange& range) const {
  if (range.empty()) return true;
  const auto held = std::upper_bound(ranges_.begin(), ranges_.end(), range.begin,
                                     [](std::int64_t value, const FlatRange& each) { return value < each.end; });
  return held != ranges_.end() && held->begin <= range.begin && range.end <= held->end;
}

bool FlatShards::operator==(const FlatShards& other) const {
  return std::equal(ranges_.begin(), ranges_.end(), other.ranges_.begin(), other.ranges_.end(),
                    [](const FlatRange& a, const FlatRange& b) { return a.begin == b.begin && a.end == b.end; });
}

FlatLayout::FlatLayout(std::vector<std::int64_t> sizes, int ranks, const std::vector<std::size_t>& unit_starts)
    : sizes_(std::move(sizes)), ranks_(ranks) {
  if (ranks < 1) throw std::invalid_argument("a flat layout needs at least one rank, got " + std::to_string(ranks));
  std::vector<bool> starts(sizes_.size(), false);
  for (const std::size_t position : unit_starts) {
    if (position < starts.size()) starts[position] = true;
  }
  for (std::size_t position = 0; position < sizes_.size(); ++position) {
    if (sizes_[position] < 0) throw std::invalid_argument("a parameter of " + std::to_string(sizes_[position]) + " elements");
    if (position == 0 || starts[position]) units_.push_back({{total_, total_}, 0});
    offsets_.push_back(total_);
    total_ += sizes_[position];
    units_.back().range.end = total_;
    unit_of_position_.push_back(units_.size() - 1);
  }
  if (units_.empty()) units_.push_back({{0, 0}, 0});
  for (Unit& unit : units_) {
    const std::int64_t share = (unit.range.size() + ranks - 1) / ranks;
    unit.shard = (share + kPartitionAlignment - 1) / kPartitionAlignment * kPartitionAlignment;
    partition_ += unit.shard;
  }
}

FlatRange FlatLayout::partition(int rank) const {
  if (units_.size() != 1) throw std::logic_error("a layout of " + std::to_string(units_.size()) + " units has a shard per unit, not one partition");
  const FlatShards held = shards(rank);
  // Ranks past the end hold padding only: an empty range at the end.
  return held.empty() ? FlatRange{total_, total_} : held.ranges().front();
}

FlatShards FlatLayout::shards(int rank) const {
  if (rank < 0 || rank >= ranks_) {
    throw std::out_of_range("rank " + std::to_string(rank) + " of a layout over " + std::to_string(ranks_) + " ranks");
  }
  std::vector<FlatRange> held;
  for (const Unit& unit : units_) held.push_back(FlatRange{unit.range.begin + unit.shard * rank, unit.range.begin + unit.shard * (rank + 1)}.intersect(unit.range));
  return FlatShards(std::move(held));
}

const FlatLayout::Unit& FlatLayout::unit_holding(const FlatRange& range) const {
  const auto unit = std::upper_bound(units_.begin(), units_.end(), range.begin, [](std::int64_t element, const Unit& each) { return element < each.range.end; });
  if (unit == units_.end() || range.end > unit->range.end) {
    throw std::logic_error("flat elements [" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ") span two units of the layout");
  }
  return *unit;
}

std::vector<std::size_t> FlatLayout::owned_counts(const FlatRange& range) const {
  std::vector<std::size_t> counts(static_cast<std::size_t>(ranks_), 0);
  if (range.empty()) return counts;
  const Unit& unit = unit_holding(range);
  for (int rank = 0; rank < ranks_; ++rank) {
    const FlatRange shard{unit.range.begin + unit.shard * rank, unit.range.begin + unit.shard * (rank + 1)};
    counts[static_cast<std::size_t>(rank)] = static_cast<std::size_t>(range.intersect(shard).size());
  }
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
  for (std::size_t position = 1; position < sizes_.size(); ++position) {
    if (unit_of_position_[position] != unit_of_position_[position - 1]) starts[position] = true;
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
  for (const Unit& unit : units_) {
    const std::int64_t step = elements > 0 ? elements : std::max<std::int64_t>(unit.range.size(), 1);
    for (std::int64_t begin = unit.range.begin; begin < unit.range.end; begin += step) result.push_back({begin, std::min(unit.range.end, begin + step)});
  }
  return result;
}

}  // namespace ferry
