#include "engine/grid/flat_layout.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ferry {
namespace {

TEST(FlatLayout, PartitionsAreEqualAlignedAndCoverEveryElement) {
  const FlatLayout layout({100, 7, 300, 1}, 4);  // 408 elements
  EXPECT_EQ(layout.total(), 408);
  EXPECT_EQ(layout.partition_size(), 128);  // ceil(408 / 4) = 102, aligned up to 64
  EXPECT_EQ(layout.partition(0).begin, 0);
  EXPECT_EQ(layout.partition(0).end, 128);
  EXPECT_EQ(layout.partition(3).begin, 384);
  EXPECT_EQ(layout.partition(3).end, 408);
  std::int64_t covered = 0;
  for (int rank = 0; rank < 4; ++rank) covered += layout.partition(rank).size();
  EXPECT_EQ(covered, 408);
}

TEST(FlatLayout, RanksPastTheEndHoldNothing) {
  const FlatLayout layout({10}, 4);  // one partition of 64 holds everything
  EXPECT_EQ(layout.partition(0).size(), 10);
  for (int rank = 1; rank < 4; ++rank) {
    EXPECT_TRUE(layout.partition(rank).empty());
    EXPECT_EQ(layout.partition(rank).begin, 10);
  }
  EXPECT_EQ(layout.owned_counts({0, 10}), (std::vector<std::size_t>{10, 0, 0, 0}));
}

TEST(FlatLayout, OwnedCountsSplitARangeByOwner) {
  const FlatLayout layout({100, 7, 300, 1}, 4);
  const std::vector<std::size_t> counts = layout.owned_counts({100, 300});
  EXPECT_EQ(counts, (std::vector<std::size_t>{28, 128, 44, 0}));
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::size_t{0}), 200u);
}

TEST(FlatLayout, BucketsGroupWholeParametersFromTheEnd) {
  const FlatLayout layout({100, 7, 300, 1, 2}, 2);
  const std::vector<GradientBucket> buckets = layout.buckets(110);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].first, 3u);  // 1 + 2; adding 300 would pass 110
  EXPECT_EQ(buckets[0].last, 4u);
  EXPECT_EQ(buckets[1].first, 2u);  // 300 alone: larger than the bound
  EXPECT_EQ(buckets[1].last, 2u);
  EXPECT_EQ(buckets[2].first, 0u);  // 7 + 100
  EXPECT_EQ(buckets[2].range.begin, 0);
  EXPECT_EQ(buckets[2].range.end, 107);
  EXPECT_EQ(layout.buckets(0).size(), 1u);
  // Groups (a pipeline rank's stages; a parameter kept alone) split the one bucket at their starts.
  const std::vector<GradientBucket> split = layout.buckets(0, {1, 2});
  ASSERT_EQ(split.size(), 3u);
  EXPECT_EQ(split[0].first, 2u);
  EXPECT_EQ(split[0].last, 4u);
  EXPECT_EQ(split[1].first, 1u);
  EXPECT_EQ(split[1].last, 1u);
  EXPECT_EQ(split[1].range.begin, 100);
  EXPECT_EQ(split[1].range.end, 107);
  EXPECT_EQ(split[2].first, 0u);
  EXPECT_EQ(split[2].last, 0u);
  ASSERT_EQ(layout.buckets(0, {0, 1}).size(), 2u);
  EXPECT_EQ(layout.buckets(0, {0, 1})[1].range.end, 100);
}

TEST(FlatLayout, ChunksCoverTheSpace) {
  const FlatLayout layout({100, 7}, 2);
  const std::vector<FlatRange> chunks = layout.chunks(50);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[2].begin, 100);
  EXPECT_EQ(chunks[2].end, 107);
  EXPECT_EQ(layout.chunks(0).size(), 1u);
}

}  // namespace
}  // namespace ferry
