// The out-of-memory advice's search, priced by the planner's step-time model: each candidate's cost is
// the model's step time of its variant beside the plan's, the answer is the cheapest combination that
// fits (checked against every combination), and the model's call costs move with what the advice changes
// (micro-batches, gradient buckets, the cpu kernels' weight slices).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/plan/cheapest_first.h"
#include "engine/plan/cluster.h"
#include "engine/plan/memory_advice.h"
#include "engine/plan/step_time_model.h"
#include "models/gpt_config.h"

namespace ferry {
namespace {

TrainingPlan small_plan() {
  TrainingPlan plan;
  plan.model = *gpt_preset("gpt2-tiny");
  plan.sequence = 64;
  plan.micro_batch = 8;
  plan.micro_batches = 1;
  plan.precision = DType::bf16;
  return plan;
}

// A stand-in for a dry run, monotone in every setting the advice moves: activations by micro-batch and
// recompute, the optimizer's state unless offloaded, the gradients' buckets in flight, the weight copies.
std::int64_t modelled_peak(const TrainingPlan& plan) {
  const std::int64_t psi = plan.model.parameter_count();
  const double kept = plan.recompute.name() == "full" ? 0.25 : plan.recompute.name() == "none" ? 1.0 : 0.7;
  std::int64_t bytes = 2 * psi + static_cast<std::int64_t>(kept * static_cast<double>(plan.micro_batch * plan.sequence * 40'000));
  if (plan.offload_optimizer) {
    bytes += 4 * (plan.reduce_bucket_elements > 0 ? std::min<std::int64_t>(3 * plan.reduce_bucket_elements, psi) : psi / 4);
  } else {
    bytes += 16 * psi;
  }
  bytes += 4 * (plan.weight_copy_elements > 0 ? plan.weight_copy_elements : 4 * plan.model.hidden * plan.model.hidden);
  if (!plan.allocator.expandable_segments) bytes += 1 << 20;
  return bytes;
}

TEST(MemoryAdvice, TheCheapestThatFitsByThePlannersModel) {
  const TrainingPlan plan = small_plan();
  const ClusterSpec cluster = parse_cluster("1x1xcpu", 1, 1e11);
  const auto step_seconds = [&](const TrainingPlan& variant) { return predict_step_time(variant, cluster).total(); };
  const std::vector<SearchAxis> axes = memory_search_axes(plan);
  const std::int64_t full = modelled_peak(plan);
  ASSERT_GT(axes.size(), 3u);

  // Every combination, by brute force: the cheapest under each limit that fits.
  std::vector<std::size_t> picks(axes.size(), 0);
  struct Combination {
    double seconds;
    std::int64_t peak;
  };
  std::vector<Combination> all;
  for (;;) {
    TrainingPlan variant = plan;
    for (std::size_t axis = 0; axis < axes.size(); ++axis) {
      if (axes[axis].choices[picks[axis]].apply) axes[axis].choices[picks[axis]].apply(variant);
    }
    all.push_back({step_seconds(variant) - step_seconds(plan), modelled_peak(variant)});
    std::size_t axis = 0;
    while (axis < axes.size() && ++picks[axis] == axes[axis].choices.size()) picks[axis++] = 0;
    if (axis == axes.size()) break;
  }
  std::int64_t least = std::numeric_limits<std::int64_t>::max();
  for (const Combination& each : all) least = std::min(least, each.peak);
  for (const double share : {0.9, 0.6, 0.4}) {
    const auto limit = static_cast<std::size_t>(static_cast<double>(full) * share);
    ASSERT_LE(least, static_cast<std::int64_t>(limit)) << "a limit nothing fits tests nothing here";
    double cheapest = std::numeric_limits<double>::max();
    for (const Combination& each : all) {
      if (each.peak <= static_cast<std::int64_t>(limit)) cheapest = std::min(cheapest, each.seconds);
    }
    const MemorySearch search = search_memory(plan, axes, limit, modelled_peak, step_seconds, 3, 1000);
    ASSERT_FALSE(search.fitting.empty()) << share;
    EXPECT_NEAR(search.fitting.front().seconds, cheapest, 1e-12) << share << ": " << search.fitting.front().flags;
    EXPECT_GT(search.fitting.front().seconds, 0);
    EXPECT_LT(search.measured, all.size()) << "the search measured every combination";
    for (std::size_t i = 1; i < search.fitting.size(); ++i) {  // costlier ones only where they save more
      EXPECT_GE(search.fitting[i].seconds, search.fitting[i - 1].seconds);
      EXPECT_LT(search.fitting[i].peak_reserved, search.fitting[i - 1].peak_reserved);
    }
  }
}

// The loop both searches share, on candidates 0..7 whose "peak" is 10 - i (the limit 6: 4 and up fit):
// floors and dominance pass candidates over unmeasured, a likely-too-big one cheaper than the first fit
// is measured after the rest, and the loop stops at `wanted` or the budget.
TEST(CheapestFirst, SkipsWhatIsKnownTooBigAndMeasuresTheRestInOrder) {
  std::vector<std::size_t> measured;
  CheapestFirstSearch loop;
  loop.candidates = 8;
  loop.wanted = 2;
  loop.budget = 100;
  loop.measure = [&](std::size_t i) {
    measured.push_back(i);
    return 10 - static_cast<int>(i) <= 6;
  };
  loop.too_big_unmeasured = [](std::size_t i) -> std::optional<std::string> {
    if (i == 1) return "a floor over the limit";
    return std::nullopt;
  };
  loop.holds_no_less = [](std::size_t a, std::size_t b) { return a == 2 && b == 0; };  // 2 is too big where 0 is
  loop.likely_too_big = [](std::size_t i) { return i == 5 || i == 3; };
  CheapestFirstResult result = search_cheapest_first(loop);
  EXPECT_EQ(measured, (std::vector<std::size_t>{0, 4, 6, 3}));  // 3 waited, and is cheaper than the fit 4
  using Verdict = CheapestFirstOutcome::Verdict;
  EXPECT_EQ(result.outcomes[1].verdict, Verdict::too_big_unmeasured);
  EXPECT_EQ(result.outcomes[1].why, "a floor over the limit");
  EXPECT_EQ(result.outcomes[2].verdict, Verdict::too_big_as);
  EXPECT_EQ(result.outcomes[2].as, 0u);
  EXPECT_EQ(result.outcomes[4].verdict, Verdict::fits);
  EXPECT_EQ(result.outcomes[5].verdict, Verdict::not_reached);  // waited, and costlier than the fit found
  EXPECT_EQ(result.outcomes[7].verdict, Verdict::not_reached);
  EXPECT_EQ(result.fitting, 2u);
  EXPECT_FALSE(result.budget_spent);

  measured.clear();
  loop.budget = 2;
  result = search_cheapest_first(loop);
  EXPECT_EQ(measured, (std::vector<std::size_t>{0, 4}));
  EXPECT_TRUE(result.budget_spent);
}

TEST(StepTimeModel, CallsCostMoreMicroBatchesBucketsAndWeightSlices) {
  const ClusterSpec cluster = parse_cluster("1x1xcpu", 1, 1e11);
  TrainingPlan plan = small_plan();
  const StepTimeEstimate base = predict_step_time(plan, cluster);
  const double ops = static_cast<double>(plan.model.layers) * kOpCallsPerBlock + kOpCallsOutsideBlocks;
  EXPECT_NEAR(base.calls, ops * cluster.call_seconds + 2 * static_cast<double>(plan.model.layers) * 4 * cluster.call_seconds, 1e-15);

  // The same tokens in 8 micro-batches: the same FLOPs, each micro-batch's calls again.
  TrainingPlan split = plan;
  split.micro_batch = 1;
  split.micro_batches = 8;
  const StepTimeEstimate split_time = predict_step_time(split, cluster);
  EXPECT_NEAR(split_time.compute, base.compute, 1e-12);
  EXPECT_NEAR(split_time.calls, 8 * base.calls, 1e-15);

  // Offloaded on one rank: a copy per parameter, and per row slice of a bucket bound.
  TrainingPlan offloaded = plan;
  offloaded.offload_optimizer = offload::OffloadDevice::cpu;
  const double tensors = 12.0 * static_cast<double>(plan.model.layers) + 4;
  EXPECT_NEAR(predict_step_time(offloaded, cluster).calls - base.calls, tensors * cluster.collective_seconds, 1e-15);
  offloaded.reduce_bucket_elements = 4096;
  const double slices = std::floor(static_cast<double>(plan.model.parameter_count()) / 4096);
  EXPECT_NEAR(predict_step_time(offloaded, cluster).calls - base.calls, (tensors + slices) * cluster.collective_seconds, 1e-15);

  // The cpu kernels' 16-bit weights copied in slices of h x h: c_attn 3, c_proj 1, c_fc 4, mlp c_proj 4,
  // twice a micro-batch; on cuda kernels there are none.
  TrainingPlan sliced = plan;
  sliced.weight_copy_elements = plan.model.hidden * plan.model.hidden;
  EXPECT_NEAR(predict_step_time(sliced, cluster).calls - base.calls, 2 * static_cast<double>(plan.model.layers) * (12 - 4) * cluster.call_seconds, 1e-15);
  sliced.kernels = plan.kernels = DeviceKind::cuda;
  EXPECT_NEAR(predict_step_time(sliced, cluster).calls, predict_step_time(plan, cluster).calls, 1e-15);
}

}  // namespace
}  // namespace ferry
