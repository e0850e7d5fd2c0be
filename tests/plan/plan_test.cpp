// The planner's parts: cluster presets and their errors, the step-time model's FLOP counts and parts,
// and the search's judgement (every plan it calls fitting fits by its dry run, every one too big is
// over, in the order the model predicts).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "engine/plan/cluster.h"
#include "engine/plan/cpu_calibration.h"
#include "engine/plan/plan_search.h"
#include "engine/plan/step_time_model.h"
#include "models/gpt_config.h"

namespace ferry {
namespace {

TEST(ClusterSpec, PresetsAndTheirLinks) {
  const ClusterSpec cluster = parse_cluster("8x8xH100-80GB", 1, 0);
  EXPECT_EQ(cluster.world(), 64);
  EXPECT_EQ(cluster.kind, DeviceKind::cuda);
  EXPECT_EQ(cluster.device_memory, std::size_t{81559} << 20);
  EXPECT_DOUBLE_EQ(cluster.peak_flops, 989e12);
  // A dp group of 8 consecutive ranks stays in a node; 16 spans two; pipeline neighbours 8 apart cross nodes.
  EXPECT_DOUBLE_EQ(cluster.group_bandwidth(8, 1), cluster.intra_node_bandwidth);
  EXPECT_DOUBLE_EQ(cluster.group_bandwidth(16, 1), cluster.inter_node_bandwidth);
  EXPECT_DOUBLE_EQ(cluster.group_bandwidth(2, 8), cluster.inter_node_bandwidth);
  EXPECT_DOUBLE_EQ(cluster.group_bandwidth(2, 4), cluster.intra_node_bandwidth);
  const ClusterSpec local = parse_cluster("local", 4, 8e10);
  EXPECT_EQ(local.world(), 4);
  EXPECT_EQ(local.kind, DeviceKind::cpu);
  EXPECT_DOUBLE_EQ(local.peak_flops, 2e10);  // the machine's rate shared by its ranks
  for (const char* bad : {"8x8", "0x8xH100-80GB", "1x1xTPU-v5", "ax2xcpu", "2x2x"}) {
    try {
      parse_cluster(bad, 1, 1);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("H100-80GB"), std::string::npos) << error.what();  // names the presets
    }
  }
}

TEST(StepTimeModel, CountsGpt2sFlopsAndStatesItsParts) {
  const GptConfig gpt2 = *gpt_preset("gpt2");
  // 12 blocks of 24 h^2 matmul FLOPs and 4 s h of attention, and the tied head's 2 V h, per token.
  const double h = 768, s = 1024, v = static_cast<double>(gpt2.vocab);
  EXPECT_DOUBLE_EQ(forward_flops_per_token(gpt2, 1024), 12 * (24 * h * h + 4 * s * h) + 2 * v * h);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(gpt2, 1024, RecomputePolicy::parse("full")), 12 * (24 * h * h + 4 * s * h));
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(gpt2, 1024, RecomputePolicy::parse("selective")), 12 * 4 * s * h);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(gpt2, 1024, RecomputePolicy::parse("none")), 0);

  ClusterSpec cluster = parse_cluster("1x8xH100-80GB", 1, 0);
  TrainingPlan plan;
  plan.model = gpt2;
  plan.sequence = 1024;
  plan.precision = DType::bf16;
  plan.grid.dp = 8;
  plan.micro_batch = 4;
  plan.micro_batches = 2;
  const StepTimeEstimate base = predict_step_time(plan, cluster);
  const double tokens = 4 * 1024;
  EXPECT_NEAR(base.compute, 2 * 3 * tokens * forward_flops_per_token(gpt2, 1024) / (989e12 * 0.45), 1e-12);
  EXPECT_EQ(base.bubble, 0);
  EXPECT_EQ(base.zero3_gathers, 0);
  EXPECT_GT(base.optimizer, 0);
  // Full recompute adds the blocks' forward again; a pipeline idles p - 1 micro-batch slots.
  plan.recompute = RecomputePolicy::parse("full");
  EXPECT_GT(predict_step_time(plan, cluster).recompute, 0);
  plan.recompute = RecomputePolicy{};
  plan.grid = {1, 4, 2};
  const StepTimeEstimate piped = predict_step_time(plan, cluster);
  EXPECT_NEAR(piped.bubble, piped.compute / 2, 1e-12);  // (p - 1) of the m = 2 micro-batches' slots
  EXPECT_GT(piped.pipeline_transfers, 0);
  // ZeRO 3 gathers; the optimizer on the host costs its host step and transfers.
  plan.grid = {1, 8, 1};
  plan.zero_stage = 3;
  EXPECT_GT(predict_step_time(plan, cluster).zero3_gathers, 0);
  plan.zero_stage = 2;
  plan.offload_optimizer = offload::OffloadDevice::cpu;
  EXPECT_GT(predict_step_time(plan, cluster).optimizer, base.optimizer);
}

TEST(PlanSearch, FittingMeansTheDryRunFitsAndTooBigMeansOver) {
  PlanSearchRequest request;
  request.base.model = "gpt2-tiny";
  request.base.seq = 64;
  request.cluster = parse_cluster("1x2xcpu", 1, 1e10);
  request.cluster.device_memory = std::size_t{9} << 20;
  request.global_batch = 8;
  request.wanted = 3;
  request.budget = 24;
  const PlanSearch search = search_plans(request);
  EXPECT_LE(search.dry_runs, request.budget);
  std::size_t fits = 0, too_big = 0;
  double last_rate = 1e300;
  for (const PlanCandidate& candidate : search.candidates) {
    const auto limit = static_cast<std::int64_t>(request.cluster.device_memory);
    if (candidate.status == PlanCandidate::Status::fits) {
      ++fits;
      EXPECT_LE(candidate.peak_reserved, limit);
      EXPECT_LE(candidate.tokens_per_second, last_rate);  // ranked by predicted tokens/s
      last_rate = candidate.tokens_per_second;
      ASSERT_EQ(candidate.ranks.size(), static_cast<std::size_t>(candidate.settings.dp * candidate.settings.pp));
    } else if (candidate.status == PlanCandidate::Status::too_big) {
      ++too_big;
      if (candidate.ranks.is_null()) {  // judged by ZeRO's formula alone
        EXPECT_GT(candidate.model_states_floor, limit);
        EXPECT_NE(candidate.why_not.find("model states alone"), std::string::npos) << candidate.why_not;
      } else {
        EXPECT_GT(candidate.peak_reserved, limit);
        EXPECT_NE(candidate.why_not.find("rank "), std::string::npos) << candidate.why_not;
      }
    }
    EXPECT_EQ(candidate.settings.dp * candidate.settings.micro_batch * candidate.settings.micro_batches, request.global_batch);
  }
  EXPECT_EQ(fits, 3u);
  EXPECT_GT(too_big, 0u) << "9 MiB should leave some plans of gpt2-tiny out";
  request.global_batch = 3;  // no dp of 2 divides it: only dp 1 x pp 2
  for (const PlanCandidate& candidate : search_plans(request).candidates) EXPECT_EQ(candidate.settings.pp, 2);
}

// --host-memory judges what a node keeps on the host: an offloaded optimizer's state and gradients
// (ZeRO-Offload's formula), and on cpu devices the ranks' device memory, the same RAM.
TEST(PlanSearch, HostMemoryHoldsTheOffloadedOptimizer) {
  PlanSearchRequest request;
  request.base.model = "gpt2-tiny";
  request.base.seq = 64;
  request.cluster = parse_cluster("1x2xA100-40GB", 1, 0);
  request.global_batch = 2;
  request.wanted = request.budget = 1000;  // measure every plan
  const std::int64_t parameters = gpt_preset("gpt2-tiny")->parameter_count();
  const auto judged = [&](std::size_t host_memory) {
    request.cluster.host_memory = host_memory;
    std::size_t offloaded_fits = 0, offloaded_too_big = 0;
    for (const PlanCandidate& candidate : search_plans(request).candidates) {
      const PlanSettings& s = candidate.settings;
      if (candidate.status == PlanCandidate::Status::refused) continue;
      if (candidate.status == PlanCandidate::Status::not_measured) {  // a smaller micro-batch of it was too big already
        EXPECT_TRUE(s.offload_optimizer) << s.text();
        EXPECT_EQ(candidate.why_not.find("too big as"), 0u) << candidate.why_not;
        continue;
      }
      // f32: 8 bytes of moments and 4 of gradients for each parameter a rank updates (and 4 of the
      // parameter itself when ZeRO-Infinity offloads the partition), two ranks a node.
      const std::int64_t updated = s.zero_stage >= 1 ? (parameters / s.pp + s.dp - 1) / s.dp : parameters / s.pp;
      EXPECT_EQ(candidate.host_bytes, s.offload_optimizer ? 2 * (s.offload_parameters ? 16 : 12) * updated : 0) << s.text();
      EXPECT_TRUE(!s.offload_parameters || (s.offload_optimizer && s.zero_stage == 3)) << s.text();
      if (!s.offload_optimizer) {
        EXPECT_EQ(candidate.status, PlanCandidate::Status::fits) << s.text() << ": " << candidate.why_not;
      } else if (candidate.status == PlanCandidate::Status::fits) {
        ++offloaded_fits;
        EXPECT_LE(candidate.host_bytes, static_cast<std::int64_t>(host_memory));
      } else {
        ++offloaded_too_big;
        EXPECT_GT(candidate.host_bytes, static_cast<std::int64_t>(host_memory));
        EXPECT_NE(candidate.why_not.find("node 0's host memory"), std::string::npos) << candidate.why_not;
      }
    }
    return std::pair{offloaded_fits, offloaded_too_big};
  };
  const auto [fits_small, too_big_small] = judged(std::size_t{8} << 20);  // 8 MiB: under any plan's 9.6 MiB (ZeRO 1+) or 20 MiB
  EXPECT_EQ(fits_small, 0u);
  EXPECT_GT(too_big_small, 0u);
  const auto [fits_some, too_big_some] = judged(std::size_t{16} << 20);  // the partitioned optimizer fits, the whole one does not
  EXPECT_GT(fits_some, 0u);
  EXPECT_GT(too_big_some, 0u);
  const auto [fits_all, too_big_none] = judged(std::size_t{1} << 30);
  EXPECT_GT(fits_all, 0u);
  EXPECT_EQ(too_big_none, 0u);
}

// ZeRO's model-state formula is a floor under every rank's measured peak (what lets the search call a
// plan too big without a dry run): every plan of two shapes, each precision, 4 ranks, measured.
TEST(PlanSearch, ModelStatesFloorIsBelowEveryMeasuredPeak) {
  for (const char* precision : {"fp32", "bf16"}) {
    PlanSearchRequest request;
    request.base.model = "gpt2-tiny";
    request.base.hidden = 256;  // model states well above the activations, so the floor is close
    request.base.seq = 8;
    request.base.precision = precision;
    request.cluster = parse_cluster("1x4xA100-40GB", 1, 0);
    request.global_batch = 4;
    request.wanted = request.budget = 1000;
    std::size_t measured = 0;
    double closest = 0;  // the largest floor / peak
    for (const PlanCandidate& candidate : search_plans(request).candidates) {
      if (candidate.ranks.is_null()) continue;
      ++measured;
      if (!candidate.settings.offload_parameters) {  // else nothing of the model's states stays on the device
        EXPECT_GT(candidate.model_states_floor, 0) << candidate.settings.text();
      }
      EXPECT_LE(candidate.model_states_floor, candidate.peak_reserved) << precision << " " << candidate.settings.text();
      closest = std::max(closest, static_cast<double>(candidate.model_states_floor) / static_cast<double>(candidate.peak_reserved));
    }
    EXPECT_GT(measured, 50u) << precision;
    EXPECT_GT(closest, 0.5) << precision << ": the floor is far under every peak, so this test could not catch a floor above one";
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// NVMe as a tier (placement by budget): with --nvme-path the search also puts the optimizer state on the
// node's NVMe, where the host keeps only the gradients and the NVMe buffers; under a host budget between
// the two, a plan fits with its state on NVMe while its twin with the state on the host is too big, and
// an NVMe too small for the state rules NVMe plans out.
TEST(PlanSearch, NvmeHoldsTheOptimizerWhereTheHostCannot) {
  PlanSearchRequest request;
  request.base.model = "gpt2-tiny";
  request.base.layers = 2;
  request.base.hidden = 768;
  request.base.heads = 12;
  request.base.vocab = 50257;  // 53.6M parameters: a rank's state outweighs the NVMe buffers
  request.base.seq = 32;
  request.base.precision = "bf16";
  request.base.nvme_path = "/tmp";
  request.cluster = parse_cluster("1x2xcpu", 1, 1e11);
  request.cluster.device_memory = std::size_t{1} << 30;
  request.cluster.nvme_memory = std::size_t{64} << 30;
  request.global_batch = 2;
  request.wanted = request.budget = 1000;
  const auto find = [](const PlanSearch& search, bool nvme) -> const PlanCandidate& {
    for (const PlanCandidate& candidate : search.candidates) {
      const PlanSettings& s = candidate.settings;
      if (s.dp == 2 && s.pp == 1 && s.micro_batch == 1 && s.recompute == "none" && s.zero_stage == 1 && s.offload_optimizer && s.nvme == nvme) return candidate;
    }
    throw std::logic_error("no such plan");
  };
  const PlanSearch roomy = search_plans(request);
  const PlanCandidate& on_nvme = find(roomy, true);
  const PlanCandidate& on_host = find(roomy, false);
  ASSERT_GT(on_host.host_bytes, on_nvme.host_bytes);
  ASSERT_EQ(on_nvme.status, PlanCandidate::Status::fits) << on_nvme.why_not;
  ASSERT_EQ(on_host.status, PlanCandidate::Status::fits) << on_host.why_not;
  EXPECT_EQ(on_nvme.peak_reserved, on_host.peak_reserved);  // the device holds the same
  // Each rank updates half the parameters: 12 bytes each of bf16's optimizer state (master, m, v) go to
  // NVMe; 4 of f32 gradients stay on the host beside 256 MiB of NVMe buffers.
  GptConfig config = *gpt_preset("gpt2-tiny");
  config.layers = 2;
  config.hidden = 768;
  config.heads = 12;
  config.vocab = 50257;
  const std::int64_t parameters = config.parameter_count();
  const std::int64_t updated = (parameters + 1) / 2;
  EXPECT_EQ(on_nvme.nvme_bytes, 2 * 12 * updated);
  EXPECT_EQ(on_host.host_bytes - on_nvme.host_bytes, 2 * (12 * updated - (std::int64_t{256} << 20)));
  EXPECT_GT(on_nvme.time.optimizer, on_host.time.optimizer);  // the state's trips through the NVMe
  EXPECT_EQ(on_nvme.options.offload_optimizer, "nvme");
  EXPECT_EQ(on_nvme.options.nvme_path, "/tmp");

  request.cluster.host_memory = static_cast<std::size_t>((on_nvme.host_bytes + on_host.host_bytes) / 2);
  const PlanSearch tight = search_plans(request);
  EXPECT_EQ(find(tight, true).status, PlanCandidate::Status::fits) << find(tight, true).why_not;
  EXPECT_EQ(find(tight, false).status, PlanCandidate::Status::too_big);
  EXPECT_NE(find(tight, false).why_not.find("host memory"), std::string::npos) << find(tight, false).why_not;

  request.cluster.nvme_memory = static_cast<std::size_t>(on_nvme.nvme_bytes - 1);
  EXPECT_NE(find(search_plans(request), true).why_not.find("NVMe holds the offloaded optimizer state"), std::string::npos);
  request.cluster.nvme_memory = 0;  // no NVMe: no NVMe plans
  for (const PlanCandidate& candidate : search_plans(request).candidates) EXPECT_FALSE(candidate.settings.nvme);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// The NVMe rate a cpu cluster's plans use is measured through the store the optimizer uses; the file it
// measures with is removed, and a directory that cannot be made is an error naming it.
TEST(Calibration, NvmeRateIsMeasuredAndLeavesNothingBehind) {
  const std::filesystem::path directory = std::filesystem::temp_directory_path() / ("ferry-plan-nvme-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const double rate = measure_nvme_bandwidth(directory.string(), std::size_t{8} << 20);
  EXPECT_GT(rate, 1e6);
  EXPECT_TRUE(std::filesystem::is_empty(directory));
  std::filesystem::remove_all(directory);
  try {
    measure_nvme_bandwidth("/proc/ferry-no-such-dir", std::size_t{1} << 20);
    ADD_FAILURE() << "a directory that cannot be made was measured";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("/proc/ferry-no-such-dir"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace ferry
