// FlatLayout: a model's parameters laid end to end in one flat index space (the model's order), split
// into units (the whole space for ZeRO 1 and 2; each block for ZeRO 3, as FSDP's per-module flat
// parameters) and each unit into equal aligned shards, one per data-parallel rank; and into the buckets
// gradients are reduced in. Pure arithmetic: the data-parallel runtime and its tests share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

// Elements [begin, end) of the flat space.
struct FlatRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return size() == 0; }
  FlatRange intersect(const FlatRange& other) const;
};

// Flat elements held end to end, in increasing order: a rank's share of the flat space (its shard of each
// unit), or an optimizer snapshot's. Where each element sits in the concatenation is offset().
class FlatShards {
 public:
  FlatShards() = default;
  FlatShards(FlatRange range);  // NOLINT(google-explicit-constructor): one range is a share
  explicit FlatShards(std::vector<FlatRange> ranges);  // increasing and disjoint; empty ones are dropped

  const std::vector<FlatRange>& ranges() const { return ranges_; }
  std::int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The part of `range` held. A range that meets two of the held ranges is refused (std::logic_error):
  // buckets, gathers and parameters lie inside one unit, so each meets at most one shard.
  FlatRange intersect(const FlatRange& range) const;
  // Where held element `element` sits in the concatenation (std::out_of_range where it is not held).
  std::int64_t offset(std::int64_t element) const;
  // Whether every element of `range` is held, inside one of the ranges.
  bool holds(const FlatRange& range) const;
  bool operator==(const FlatShards& other) const;

 private:
  std::vector<FlatRange> ranges_;
  std::vector<std::int64_t> offsets_;  // [range] -> its first element's place in the concatenation
  std::int64_t size_ = 0;
};

// Elements `range` of the flat space reduced together; they belong to parameters [first, last]
// (positions in the layout), the first and last of which it may hold only in part.
struct GradientBucket {
  std::size_t first = 0;
  std::size_t last = 0;
  FlatRange range;
};

class FlatLayout {
 public:
  // Partitions are rounded up to a multiple of kPartitionAlignment elements (256 bytes of f32), so
  // each starts aligned; the last ones may hold padding only.
  static constexpr std::int64_t kPartitionAlignment = 64;

  // `sizes`: each parameter's element count, in the model's order. `ranks`: the data-parallel size.
  // `unit_starts`: the positions that start a unit (besides 0); none: the whole space is one unit.
  FlatLayout(std::vector<std::int64_t> sizes, int ranks, const std::vector<std::size_t>& unit_starts = {});

  std::size_t parameter_count() const { return sizes_.size(); }
  std::int64_t total() const { return total_; }             // elements of all parameters
  std::int64_t partition_size() const { return partition_; }  // elements per rank (padding included)
  int ranks() const { return ranks_; }
  std::size_t unit_count() const { return units_.size(); }
  FlatRange parameter(std::size_t position) const { return {offsets_[position], offsets_[position] + sizes_[position]}; }
  // Rank r's partition of a one-unit layout, cut to the parameters (it may be empty when padding is all
  // it holds). A layout of several units has a shard per unit: shards().
  FlatRange partition(int rank) const;
  // Rank r's shard of every unit, cut to the parameters (a rank past a unit's end holds none of it).
  FlatShards shards(int rank) const;
  // The elements of `range` each rank owns, in rank order (their sum is range.size()): contiguous, in
  // rank order, as collectives' counts need. `range` lies inside one unit (std::logic_error otherwise).
  std::vector<std::size_t> owned_counts(const FlatRange& range) const;
  // The unit holding parameter `position`.
  std::size_t unit_of(std::size_t position) const { return unit_of_position_[position]; }

  // Buckets of at most `bucket_elements` elements (0: no bound) in increasing order, cut anywhere in the
  // flat space (a parameter larger than a bucket spans several): each group of parameters is cut from
  // its end backwards (backward finishes parameters in about that order), its first bucket taking the
  // remainder. Groups start at each position in `group_starts` (a pipeline rank's stages: no bucket
  // holds both the parameter before such a position and the one at it), and at each unit's start; each
  // position in `uncut` is a group and one bucket of its own whatever its size (a gradient handed over
  // as rows, or held whole).
  std::vector<GradientBucket> buckets(std::int64_t bucket_elements, const std::vector<std::size_t>& group_starts = {},
                                      const std::vector<std::size_t>& uncut = {}) const;
  // The position of the parameter holding flat element `element` (< total()).
  std::size_t position_of_element(std::int64_t element) const;
  // Contiguous ranges of at most `elements` (0: one range) covering [0, total), none spanning two units:
  // the all-gather's buckets.
  std::vector<FlatRange> chunks(std::int64_t elements) const;

 private:
  struct Unit {
    FlatRange range;
    std::int64_t shard = 0;  // elements per rank, aligned (the last ranks' may be short or empty)
  };
  // The unit holding flat range `range` (which must not span two).
  const Unit& unit_holding(const FlatRange& range) const;

  std::vector<std::int64_t> sizes_;
  std::vector<std::int64_t> offsets_;
  std::vector<Unit> units_;
  std::vector<std::size_t> unit_of_position_;
  std::int64_t total_ = 0;
  std::int64_t partition_ = 0;
  int ranks_ = 1;
};

}  // namespace ferry
