// The planner's search: every plan the trainer can run for a model, a global batch and a cluster (pp
// dividing the world, dp the rest; micro-batch and micro-batches; recompute policy; ZeRO stage; optimizer
// offload, at stage 3 parameter offload, and with an NVMe directory the optimizer on NVMe), ranked by the
// step-time model, and judged for memory by dry runs of every rank on meta in that order (cheapest_first.h)
// until the wanted number fit (each node's host memory and NVMe by ZeRO-Offload's formula): so a plan
// called fitting has each rank's exact peak (a pipeline's too: its sent tensors are freed at fixed points
// of the schedule), one called too big names its fullest rank or node and
// the bytes it lacks, and the search stays a few dry runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/plan/cluster.h"
#include "engine/plan/step_time_model.h"
#include "engine/train/train_options.h"

namespace ferry {

struct PlanSettings {
  int dp = 1;
  int pp = 1;
  std::int64_t micro_batch = 1;
  std::int64_t micro_batches = 1;  // per step on each dp rank (a pipeline's micro-batches)
  std::string recompute = "none";
  int zero_stage = 0;
  bool offload_optimizer = false;
  bool offload_parameters = false;  // ZeRO-Infinity's parameter partition in pinned host memory (stage 3, optimizer offloaded)
  bool nvme = false;                // the offloaded optimizer state on the node's NVMe (its gradients and buffers on the host)
  // The `ferry train` flags that set these (with NVMe, --nvme-path comes from the request).
  std::vector<std::string> flags() const;
  std::string text() const;  // "dp 4 x pp 2, micro-batch 2 x 8, recompute none, ZeRO 1, optimizer on the device"
  const char* offload_text() const;  // "device", "host" (the optimizer), "host+params", "nvme"
  nlohmann::json to_json() const;  // as the summary's "settings"
  static PlanSettings from_json(const nlohmann::json& json);
};

struct PlanCandidate {
  enum class Status : std::uint8_t { fits, too_big, refused, not_measured };
  PlanSettings settings;
  StepTimeEstimate time;
  double tokens_per_second = 0;
  double mfu = 0;
  Status status = Status::not_measured;
  std::string why_not;           // too big: the fullest rank, its largest category, the bytes over; refused: the trainer's reason
  std::int64_t peak_reserved = 0;  // the fullest rank's (measured candidates)
  // The fullest node's host bytes (measured candidates that fit their devices): ZeRO-Offload's state and
  // gradients by the formula (with NVMe: the gradients and the NVMe buffers), and on cpu devices the
  // ranks' device memory (the same RAM).
  std::int64_t host_bytes = 0;
  std::int64_t nvme_bytes = 0;     // a node's NVMe bytes: its ranks' offloaded optimizer state (NVMe plans)
  // ZeRO's formula for the fullest rank's model states on the device (no peak is below it): a plan whose
  // formula alone is over the device is too big without a dry run (ranks stays null).
  std::int64_t model_states_floor = 0;
  int fullest_rank = 0;
  nlohmann::json ranks;          // measured: each rank's peak_reserved, peak_allocated, max_by_category
  TrainOptions options;          // the candidate as `ferry train` options on the cluster's device
};

struct PlanSearchRequest {
  TrainOptions base;             // the model's shape, sequence, precision (and anything else given; nvme_path: where NVMe plans train)
  ClusterSpec cluster;
  std::int64_t global_batch = 0;
  std::size_t wanted = 5;        // fitting plans to find
  std::size_t budget = 40;       // dry runs at most
};

struct PlanSearch {
  std::vector<PlanCandidate> candidates;  // fitting first (by predicted tokens/s), then too big, refused, not measured
  std::size_t dry_runs = 0;
  double seconds = 0;
};

// Throws std::invalid_argument when the request has no plan at all (a global batch the world cannot
// divide, no pipeline depth that fits the layers).
PlanSearch search_plans(const PlanSearchRequest& request);

const char* plan_status_name(PlanCandidate::Status status);

// `base` (the model, sequence, precision and the rest) trained as `settings` on `cluster`'s device, with
// its memory as --device-memory: the options of a candidate, and of `ferry train --plan auto`.
TrainOptions plan_train_options(const TrainOptions& base, const PlanSettings& settings, const ClusterSpec& cluster);

}  // namespace ferry
