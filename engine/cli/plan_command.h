// `ferry plan`: the best plans for a model, a global batch and a cluster (engine/plan/): ranked by
// predicted tokens/s, each fitting plan with its fullest rank's exact peak and headroom, the rest with
// why not; the launch command and DeepSpeed-style JSON of the best; a summary JSON of every plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/plan/plan_search.h"

namespace CLI {
class App;
}

namespace ferry {

struct PlanCommandOptions {
  TrainOptions model;                  // --model, --layers, --hidden, --heads, --vocab, --seq, --precision
  std::int64_t global_batch = 0;       // --global-batch (sequences per optimizer step)
  std::string cluster = "local";       // NODESxDEVICESxKIND or local
  std::optional<int> ranks;            // --ranks: local's cpu ranks (default: the cores)
  std::string device_memory, host_memory;
  std::string nvme;                    // --nvme: NVMe bytes per node (cpu: default the free space of --nvme-path)
  std::optional<double> peak_flops, efficiency, intra_node_bandwidth, inter_node_bandwidth, nvme_bandwidth;
  std::size_t top = 5;                 // fitting plans to find
  std::size_t max_dry_runs = 40;
  std::string summary;
};

void add_plan_command(CLI::App& app, PlanCommandOptions& options);
// The cluster of the options: the preset or this machine, with each override applied.
ClusterSpec plan_cluster(const PlanCommandOptions& options);
// The search's result as the summary JSON (`plans`: settings, status, why not, per-rank peaks,
// predicted step seconds by part, tokens/s, MFU, command).
nlohmann::json plan_summary(const PlanSearch& search, const PlanSearchRequest& request);
int run_plan_command(const PlanCommandOptions& options);

}  // namespace ferry
