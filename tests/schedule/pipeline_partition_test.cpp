// Pipeline partitions: the cost-balanced split, every contiguous split listed cheapest first (against
// brute force, and bounded for many blocks), and the choice that weighs memory: the first split whose
// every rank fits, skipping splits where a rank holds what did not fit before, or the least-needing one.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "schedule/pipeline_partition_choice.h"

namespace ferry {
namespace {

using Split = std::vector<StageBlocks>;
using Cuts = std::vector<std::pair<std::int64_t, std::int64_t>>;

Cuts cuts(const Split& split) {
  Cuts result;
  for (const StageBlocks& stage : split) result.emplace_back(stage.first, stage.end);
  return result;
}

double most_expensive(const Split& split) {
  double most = 0;
  for (const StageBlocks& stage : split) most = std::max(most, stage.cost);
  return most;
}

TEST(PipelinePartition, BalancesBlocksWithTheHeadOnTheLastStage) {
  // Twelve equal blocks and a head worth five: the last stage takes fewer blocks.
  const std::vector<StageBlocks> stages = partition_pipeline_stages(std::vector<double>(12, 1.0), 0.0, 5.0, 4);
  ASSERT_EQ(stages.size(), 4u);
  EXPECT_EQ(stages.front().first, 0);
  EXPECT_EQ(stages.back().end, 12);
  for (std::size_t s = 1; s < stages.size(); ++s) EXPECT_EQ(stages[s].first, stages[s - 1].end);
  double most = 0;
  for (const StageBlocks& stage : stages) {
    EXPECT_GE(stage.end - stage.first, 1);
    most = std::max(most, stage.cost);
  }
  EXPECT_DOUBLE_EQ(most, 6.0);  // 4 + 4 + 3 + (1 + 5): no split does better than 6
  EXPECT_EQ(stages.back().end - stages.back().first, 1);
  EXPECT_THROW(partition_pipeline_stages(std::vector<double>(3, 1.0), 0.0, 0.0, 4), std::invalid_argument);
  const std::vector<StageBlocks> even = partition_pipeline_stages(std::vector<double>(8, 1.0), 0.0, 0.0, 4);
  for (const StageBlocks& stage : even) EXPECT_EQ(stage.end - stage.first, 2);
}

TEST(PipelinePartition, ListsEverySplitCheapestFirst) {
  const std::vector<std::vector<StageBlocks>> four = pipeline_partitions_by_cost(std::vector<double>(4, 1.0), 0.0, 0.0, 2, 10);
  ASSERT_EQ(four.size(), 3u);
  EXPECT_EQ(cuts(four[0]), (Cuts{{0, 2}, {2, 4}}));
  EXPECT_EQ(cuts(four[1]), (Cuts{{0, 1}, {1, 4}}));
  EXPECT_EQ(cuts(four[2]), (Cuts{{0, 3}, {3, 4}}));
  EXPECT_EQ(four[1].back().cost, 3.0);

  // Against brute force: every split of 8 blocks into 3 stages (21), by cost; the embedding and head count.
  std::mt19937 random(7);
  std::vector<double> costs(8);
  for (double& cost : costs) cost = std::uniform_int_distribution<int>(1, 9)(random);
  std::vector<double> expected;
  for (std::int64_t a = 1; a < 8; ++a) {
    for (std::int64_t b = a + 1; b < 8; ++b) {
      auto sum = [&](std::int64_t first, std::int64_t end) {
        double total = 0;
        for (std::int64_t layer = first; layer < end; ++layer) total += costs[static_cast<std::size_t>(layer)];
        return total;
      };
      expected.push_back(std::max({sum(0, a) + 2.0, sum(a, b), sum(b, 8) + 7.0}));
    }
  }
  std::sort(expected.begin(), expected.end());
  const std::vector<std::vector<StageBlocks>> all = pipeline_partitions_by_cost(costs, 2.0, 7.0, 3, 100);
  ASSERT_EQ(all.size(), 21u);
  std::vector<Cuts> distinct;
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(most_expensive(all[i]), expected[i]) << i;
    distinct.push_back(cuts(all[i]));
  }
  EXPECT_EQ(cuts(all.front()), cuts(partition_pipeline_stages(costs, 2.0, 7.0, 3)));
  std::sort(distinct.begin(), distinct.end());
  EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const std::vector<std::vector<StageBlocks>> five = pipeline_partitions_by_cost(costs, 2.0, 7.0, 3, 5);
  ASSERT_EQ(five.size(), 5u);
  for (std::size_t i = 0; i < five.size(); ++i) EXPECT_EQ(most_expensive(five[i]), expected[i]) << i;
}

TEST(PipelinePartition, ListsTheCheapOnesOfManyBlocksQuickly) {
  // 96 blocks into 8 stages has about 10^10 splits; the 200 cheapest are 12 blocks a stage, give or take.
  const std::vector<std::vector<StageBlocks>> cheapest = pipeline_partitions_by_cost(std::vector<double>(96, 1.0), 0.0, 0.0, 8, 200);
  ASSERT_EQ(cheapest.size(), 200u);
  EXPECT_EQ(most_expensive(cheapest.front()), 12.0);
  EXPECT_EQ(most_expensive(cheapest.back()), 13.0);
  for (std::size_t i = 1; i < cheapest.size(); ++i) EXPECT_LE(most_expensive(cheapest[i - 1]), most_expensive(cheapest[i]));
}

// A fake measure: each rank's bytes are 10 per block it holds, plus 25 on rank 0 (the embedding's table).
std::vector<std::int64_t> blocks_and_table(const Split& split, std::int32_t ranks, std::size_t& calls) {
  ++calls;
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(ranks), 0);
  for (std::size_t stage = 0; stage < split.size(); ++stage) peaks[stage % static_cast<std::size_t>(ranks)] += 10 * (split[stage].end - split[stage].first);
  peaks[0] += 25;
  return peaks;
}

TEST(PipelinePartitionChoice, TakesTheCheapestSplitThatFits) {
  // 6 equal blocks and a head worth one: cost-balanced 3 + 3 (rank 0 needs 55); 2 + 4 costs 5.
  const std::vector<std::vector<StageBlocks>> candidates = pipeline_partitions_by_cost(std::vector<double>(6, 1.0), 0.0, 1.0, 2, 100);
  std::size_t calls = 0;
  const RankPeaksOf measure = [&](const Split& split) { return blocks_and_table(split, 2, calls); };
  const PartitionChoice roomy = choose_pipeline_partition(candidates, 2, 60, measure, 10);
  EXPECT_TRUE(roomy.fits);
  EXPECT_EQ(cuts(roomy.split), cuts(candidates.front()));
  EXPECT_EQ(roomy.rank_peaks, (std::vector<std::int64_t>{55, 30}));
  EXPECT_EQ(roomy.measured, 1u);

  calls = 0;
  const PartitionChoice tight = choose_pipeline_partition(candidates, 2, 45, measure, 10);
  EXPECT_TRUE(tight.fits);
  EXPECT_EQ(cuts(tight.split), (Cuts{{0, 2}, {2, 6}}));
  EXPECT_EQ(tight.rank_peaks, (std::vector<std::int64_t>{45, 40}));
  // Measured 3 + 3, then 2 + 4 (cost 5); 4 + 2 (cost 4, before it) gives rank 0 more than 3 + 3 did: skipped.
  EXPECT_EQ(tight.measured, 2u);
  EXPECT_EQ(tight.skipped, 1u);
  EXPECT_EQ(calls, 2u);

  // Nothing fits 30: the split whose fullest rank needs least (1 + 5: 35 and 50; 2 + 4: 45 and 40).
  const PartitionChoice none = choose_pipeline_partition(candidates, 2, 30, measure, 10);
  EXPECT_FALSE(none.fits);
  EXPECT_EQ(cuts(none.split), (Cuts{{0, 2}, {2, 6}}));
  EXPECT_EQ(none.rank_peaks, (std::vector<std::int64_t>{45, 40}));
  const PartitionChoice capped = choose_pipeline_partition(candidates, 2, 30, measure, 1);
  EXPECT_EQ(capped.measured, 1u);
  EXPECT_EQ(cuts(capped.split), cuts(candidates.front()));
  EXPECT_THROW(choose_pipeline_partition({}, 2, 30, measure, 1), std::invalid_argument);
  EXPECT_THROW(choose_pipeline_partition(candidates, 3, 30, measure, 1), std::invalid_argument);
}

TEST(PipelinePartitionChoice, AnInterleavedRankIsJudgedByAllItsChunks) {
  // 8 blocks, 2 ranks x 2 chunks: rank 0 holds stages 0 and 2.
  const std::vector<std::vector<StageBlocks>> candidates = pipeline_partitions_by_cost(std::vector<double>(8, 1.0), 0.0, 0.0, 4, 100);
  std::size_t calls = 0;
  const PartitionChoice choice =
      choose_pipeline_partition(candidates, 2, 60, [&](const Split& split) { return blocks_and_table(split, 2, calls); }, 100);
  EXPECT_TRUE(choice.fits);
  // 2+2+2+2 gives rank 0 four blocks (65); so does 1+1+3+3, the first split of cost 3 (rank 0 holds 0..0
  // and 2..4); 1+2+2+3 gives it three (55), rank 1 five (50).
  EXPECT_EQ(cuts(choice.split), (Cuts{{0, 1}, {1, 3}, {3, 5}, {5, 8}}));
  EXPECT_EQ(choice.rank_peaks, (std::vector<std::int64_t>{55, 50}));
  EXPECT_EQ(choice.measured, 3u);
}

}  // namespace
}  // namespace ferry
