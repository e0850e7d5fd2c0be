// FlatLayout: a model's parameters laid end to end in one flat index space (the model's order), split
// into equal aligned partitions, one per data-parallel rank (ZeRO's flat partitions), and into the
// buckets gradients are reduced in. Pure arithmetic: the data-parallel runtime and its tests share it.
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
  FlatLayout(std::vector<std::int64_t> sizes, int ranks);

  std::size_t parameter_count() const { return sizes_.size(); }
  std::int64_t total() const { return total_; }             // elements of all parameters
  std::int64_t partition_size() const { return partition_; }  // elements per rank (padding included)
  int ranks() const { return ranks_; }
  FlatRange parameter(std::size_t position) const { return {offsets_[position], offsets_[position] + sizes_[position]}; }
  // Rank r's partition, cut to the parameters (it may be empty when padding is all it holds).
  FlatRange partition(int rank) const;
  // The elements of `range` each rank owns, in rank order (their sum is range.size()).
  std::vector<std::size_t> owned_counts(const FlatRange& range) const;

  // Buckets of at most `bucket_elements` elements (0: no bound) in increasing order, cut anywhere in the
  // flat space (a parameter larger than a bucket spans several): each group of parameters is cut from
  // its end backwards (backward finishes parameters in about that order), its first bucket taking the
  // remainder. Groups start at each position in `group_starts` (a pipeline rank's stages: no bucket
  // holds both the parameter before such a position and the one at it); each position in `uncut` is a
  // group and one bucket of its own whatever its size (a gradient handed over as rows, or held whole).
  std::vector<GradientBucket> buckets(std::int64_t bucket_elements, const std::vector<std::size_t>& group_starts = {},
                                      const std::vector<std::size_t>& uncut = {}) const;
  // The position of the parameter holding flat element `element` (< total()).
  std::size_t position_of_element(std::int64_t element) const;
  // Contiguous ranges of at most `elements` (0: one range) covering [0, total): the all-gather's buckets.
  std::vector<FlatRange> chunks(std::int64_t elements) const;

 private:
  std::vector<std::int64_t> sizes_;
  std::vector<std::int64_t> offsets_;
  std::int64_t total_ = 0;
  std::int64_t partition_ = 0;
  int ranks_ = 1;
};

}  // namespace ferry
