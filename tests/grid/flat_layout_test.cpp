#include "engine/grid/flat_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>

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

TEST(FlatLayout, BucketsAreCutAnywhereFromTheEndOfEachGroup) {
  const FlatLayout layout({100, 7, 300, 1, 2}, 2);  // 410 elements
  const std::vector<GradientBucket> buckets = layout.buckets(110);
  // From the end: [300, 410), [190, 300), [80, 190), then the remainder [0, 80).
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[0].range.begin, 0);
  EXPECT_EQ(buckets[0].range.end, 80);
  EXPECT_EQ(buckets[0].first, 0u);
  EXPECT_EQ(buckets[0].last, 0u);
  EXPECT_EQ(buckets[1].range.begin, 80);  // the end of the first parameter, the second, the third's start
  EXPECT_EQ(buckets[1].first, 0u);
  EXPECT_EQ(buckets[1].last, 2u);
  EXPECT_EQ(buckets[3].range.end, 410);
  EXPECT_EQ(buckets[3].first, 2u);
  EXPECT_EQ(buckets[3].last, 4u);
  for (const GradientBucket& bucket : buckets) EXPECT_LE(bucket.range.size(), 110);
  EXPECT_EQ(layout.buckets(0).size(), 1u);
  // Groups (a pipeline rank's stages) are cut apart; an uncut parameter is one bucket of its own.
  const std::vector<GradientBucket> split = layout.buckets(110, {2}, {1});
  ASSERT_EQ(split.size(), 5u);
  EXPECT_EQ(split[0].range.end, 100);    // [0, 100): the first group, under the bound
  EXPECT_EQ(split[1].range.begin, 100);  // the uncut parameter
  EXPECT_EQ(split[1].range.end, 107);
  EXPECT_EQ(split[2].range.begin, 107);  // [107, 410) from its end: [300, 410), [190, 300), [107, 190)
  EXPECT_EQ(split[2].range.end, 190);
  EXPECT_EQ(layout.buckets(0, {}, {2}).size(), 3u);  // before, the parameter, after
  const std::vector<GradientBucket> small = layout.buckets(50, {}, {2});  // [0, 107) in 7, 50, 50; the 300 uncut; 3
  ASSERT_EQ(small.size(), 5u);
  EXPECT_EQ(small[3].range.begin, 107);
  EXPECT_EQ(small[3].range.size(), 300);  // uncut whatever its size
  EXPECT_EQ(layout.position_of_element(106), 1u);
  EXPECT_EQ(layout.position_of_element(107), 2u);
  EXPECT_THROW(layout.position_of_element(410), std::out_of_range);
}

// ZeRO 3's layout: each layer a unit, sharded across every rank (FSDP's per-module flat parameters), so a
// layer's gather or reduction takes a contiguous, aligned share from each rank in rank order.
TEST(FlatLayout, UnitsAreShardedAcrossEveryRank) {
  const FlatLayout layout({1000, 24, 4096, 4, 700}, 4, {2, 4});  // units [0, 1024), [1024, 5124), [5124, 5824)
  EXPECT_EQ(layout.unit_count(), 3u);
  EXPECT_EQ(layout.unit_of(1), 0u);
  EXPECT_EQ(layout.unit_of(3), 1u);
  EXPECT_EQ(layout.partition_size(), 256 + 1088 + 192);  // each unit's ceil(size / 4), aligned up to 64
  // Every rank owns a shard of every unit; the last rank's are short.
  EXPECT_EQ(layout.owned_counts({0, 1024}), (std::vector<std::size_t>{256, 256, 256, 256}));
  EXPECT_EQ(layout.owned_counts({1024, 5124}), (std::vector<std::size_t>{1088, 1088, 1088, 836}));
  EXPECT_EQ(layout.owned_counts({5124, 5824}), (std::vector<std::size_t>{192, 192, 192, 124}));
  EXPECT_EQ(layout.owned_counts({1100, 1200}), (std::vector<std::size_t>{100, 0, 0, 0}));
  EXPECT_THROW(layout.owned_counts({1000, 1100}), std::logic_error);  // spans two units
  EXPECT_THROW(layout.partition(0), std::logic_error);                // one partition per unit, not one in all
  std::int64_t covered = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const FlatShards shards = layout.shards(rank);
    ASSERT_EQ(shards.ranges().size(), 3u) << rank;
    covered += shards.size();
  }
  EXPECT_EQ(covered, layout.total());
  // Rank 1's shards end to end: [256, 512), [2112, 3200), [5316, 5508).
  const FlatShards one = layout.shards(1);
  EXPECT_EQ(one.size(), 256 + 1088 + 192);
  EXPECT_EQ(one.offset(256), 0);
  EXPECT_EQ(one.offset(2112), 256);
  EXPECT_EQ(one.offset(5316 + 10), 256 + 1088 + 10);
  EXPECT_THROW(one.offset(600), std::out_of_range);
  EXPECT_EQ(one.intersect({0, 300}).begin, 256);  // inside the first unit
  EXPECT_EQ(one.intersect({0, 300}).end, 300);
  EXPECT_TRUE(one.intersect({600, 1024}).empty());
  EXPECT_THROW(one.intersect({500, 2200}), std::logic_error);  // meets two shards
  EXPECT_TRUE(one.holds({2112, 3200}));
  EXPECT_FALSE(one.holds({2000, 3200}));
  // Buckets and all-gather chunks never span two units.
  for (const GradientBucket& bucket : layout.buckets(1500)) {
    EXPECT_EQ(layout.unit_of(bucket.first), layout.unit_of(bucket.last)) << bucket.range.begin;
    EXPECT_LE(bucket.range.size(), 1500);
  }
  EXPECT_EQ(layout.buckets(0).size(), 3u);
  EXPECT_EQ(layout.chunks(0).size(), 3u);
  EXPECT_EQ(layout.chunks(2000).size(), 1u + 3u + 1u);  // 1024; 4100 in 2000, 2000, 100; 700
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
