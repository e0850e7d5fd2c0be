#include "engine/cli/auto_plan.h"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "allocator/byte_size.h"
#include "engine/comm/communicator.h"
#include "engine/plan/cpu_calibration.h"
#include "engine/plan/plan_search.h"
#include "engine/train/training_setup.h"

namespace ferry {
namespace {

// The launch as a cluster: nodes of local_size ranks (one node when the launcher's counts do not divide).
ClusterSpec launched_cluster(const TrainOptions& options, const RankEnvironment& environment, double cpu_flops) {
  const bool whole_nodes = environment.local_size > 0 && environment.world_size % environment.local_size == 0;
  const int per_node = whole_nodes ? environment.local_size : environment.world_size;
  const int nodes = environment.world_size / per_node;
  ClusterSpec cluster = parse_cluster(std::to_string(nodes) + "x" + std::to_string(per_node) + "xcpu", per_node, cpu_flops);
  cluster.device_memory = options.device_memory.empty() ? default_cpu_device_memory(per_node) : parse_byte_size(options.device_memory);
  return cluster;
}

// Rank 0's search: the best fitting plan's settings and record, or {"error": why not}.
nlohmann::json search_on_rank_zero(const TrainOptions& options, const RankEnvironment& environment) {
  PlanSearchRequest request;
  request.base = options;
  request.base.plan_path.clear();
  request.cluster = launched_cluster(options, environment, measure_cpu_gemm_flops());
  request.global_batch = options.train_batch_size.value_or(options.batch * options.grad_accum * environment.world_size);
  request.wanted = 1;
  const PlanSearch search = search_plans(request);
  for (const PlanCandidate& candidate : search.candidates) {
    if (candidate.status != PlanCandidate::Status::fits) continue;
    return {{"source", "auto"},
            {"settings", candidate.settings.to_json()},
            {"text", candidate.settings.text()},
            {"global_batch", request.global_batch},
            {"cluster", request.cluster.name},
            {"device_memory", request.cluster.device_memory},
            {"predicted_step_seconds", candidate.time.total()},
            {"ranks", candidate.ranks},
            {"dry_runs", search.dry_runs}};
  }
  std::string why = "--plan auto: no plan of " + std::to_string(search.candidates.size()) + " fits " + std::to_string(environment.world_size) +
                    " cpu ranks of " + format_bytes(request.cluster.device_memory) + " each at global batch " + std::to_string(request.global_batch);
  if (!search.candidates.empty() && !search.candidates.front().why_not.empty()) why += " (the first: " + search.candidates.front().why_not + ")";
  return {{"error", why + "; give more --device-memory, more ranks, a smaller --batch or model, or see `ferry plan`"}};
}

}  // namespace

AutoPlan resolve_auto_plan(const TrainOptions& options) {
  if (options.device != "cpu") {
    throw std::invalid_argument("--plan auto plans cpu ranks, not --device " + options.device + ": for GPUs, plan with `ferry plan --cluster "
                                "NODESxGPUSxKIND --summary FILE` and train with --plan FILE (ferry plan dry-runs each plan on meta)");
  }
  const RankEnvironment environment = detect_rank_environment();
  // Several ranks: rank 0 searches and sends its choice.
  AutoPlan plan;
  plan.world = environment.world_size > 1 ? make_communicator() : nullptr;
  Communicator* world = plan.world.get();
  std::string message;
  if (!world || world->rank() == 0) message = search_on_rank_zero(options, environment).dump();
  if (world) {
    std::uint64_t length = message.size();
    world->broadcast(&length, sizeof length, 0);
    message.resize(length);
    world->broadcast(message.data(), length, 0);
  }
  const nlohmann::json chosen = nlohmann::json::parse(message);
  if (chosen.contains("error")) throw std::invalid_argument(chosen["error"].get<std::string>());
  ClusterSpec cluster = launched_cluster(options, environment, 1.0);
  cluster.device_memory = chosen["device_memory"].get<std::size_t>();
  plan.options = plan_train_options(options, PlanSettings::from_json(chosen["settings"]), cluster);
  plan.options.plan_path.clear();
  if (!world || world->rank() == 0) {
    plan.record = chosen;
    if (!options.quiet) {
      std::printf("ferry: --plan auto: %s (global batch %lld on %s; %zu dry runs; it sets --dp, --pp, --batch, --grad-accum, "
                  "--checkpointing, --zero-stage, --offload-optimizer and --offload-param)\n",
                  chosen["text"].get<std::string>().c_str(), static_cast<long long>(chosen["global_batch"].get<std::int64_t>()),
                  chosen["cluster"].get<std::string>().c_str(), chosen["dry_runs"].get<std::size_t>());
    }
  }
  return plan;
}

}  // namespace ferry
