// TrainingPlan: what a training run is, typed: the model, the process grid (tp x dp x pp), the batch
// geometry, the precision, the ZeRO stage and its buckets, the optimizer's offload, the run's length and
// what it reads and writes. Built and validated once from the parsed flags and config (an impossible
// combination names both settings); the training loop, dry runs and the summary read the plan alone.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "engine/comm/communicator.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/grid/gather_policy.h"
#include "engine/grid/process_grid.h"
#include "engine/optim/optimizer_settings.h"
#include "engine/train/model_config.h"
#include "engine/train/train_options.h"
#include "engine/train/training_profile.h"
#include "models/gpt_model.h"
#include "offload/parameter_offload.h"
#include "offload/zero_offload_optimizer.h"
#include "schedule/recompute_policy.h"

namespace ferry {

struct TrainingPlan;

// What a rank says after running out of device memory: the changes that would fit `plan` in
// `memory_limit` bytes, as lines for the error (engine/plan's search, given by the command line, which
// sits above this folder; empty: the error names none).
using MemoryAdvisor = std::function<std::string(const TrainingPlan& plan, std::size_t memory_limit)>;

// What a run reads and writes: its data, where it starts from, its checkpoints and outputs.
struct RunIo {
  std::string data;                   // empty: the built-in corpus
  bool shuffle = true;
  std::string eval_data;              // validation data (empty: none)
  std::int64_t eval_every = 0;        // 0: at the last step only
  std::int64_t eval_batches = 20;     // 0: all of it
  std::string init_from;              // weights to start from (a new run)
  std::string resume;                 // a checkpoint's step directory (a save root is resolved to its latest)
  bool override_lr_schedule = false;  // the resumed run's schedule from the flags
  std::string save;
  std::int64_t save_every = 0;
  std::int64_t keep_checkpoints = 0;  // 0: all
  bool overwrite_checkpoints = false; // may save into a root that holds another run's checkpoints
  std::string metrics;
  std::string profile;
  ProfileSteps profile_steps;
  std::int64_t log_every = 10;
  bool quiet = false;                 // no banner or progress lines
  // false: no memory profile at all, not even a failure's (the dry runs behind `ferry plan` and
  // out-of-memory advice, which have no limit to fail at and need only the allocator's statistics).
  bool memory_profile = true;
  MemoryAdvisor memory_advisor = nullptr;  // after an out-of-memory error
};

struct TrainingPlan {
  GptConfig model;         // the model's shape: preset and flags, --init-from's, or the resumed checkpoint's
  std::int64_t sequence = 0;  // tokens per sequence (--seq; default: the model's positions)
  GridShape grid;          // tp x dp x pp
  int world = 1;           // ranks launched: grid.world(), or 1 for a dry run of every rank in one process
  std::int64_t micro_batch = 1;     // sequences per micro-batch
  std::int64_t micro_batches = 1;   // per step on each dp rank (gradient accumulation; a pipeline's micro-batches)
  std::string pipeline_schedule = "1f1b";  // pp > 1: the schedule's name (schedule/pipeline_generator.h)
  DType precision = DType::f32;
  DeviceKind device = DeviceKind::cpu;
  DeviceKind kernels = DeviceKind::cpu;   // whose kernels' allocations the run makes: the device's own, on meta the kind it stands in for (--dry-run-of)
  std::size_t device_memory_limit = 0;    // --device-memory in bytes; 0: the device's default
  RecomputePolicy recompute;              // --checkpointing (automatic: chosen by dry runs at the start)
  int zero_stage = 0;
  std::optional<offload::OffloadDevice> offload_optimizer;  // ZeRO-Offload's tier: cpu or nvme
  offload::ZeroOffloadSettings offload;   // its buffers, NVMe path and sub-groups (device: the tier when offloading)
  // ZeRO-Infinity's parameter offload (stage 3): where each rank's parameter partition lives; nothing: on the device.
  std::optional<offload::ParameterOffloadSettings> offload_param;
  std::int64_t reduce_bucket_elements = 0;     // DeepSpeed's reduce_bucket_size (0: one bucket)
  std::int64_t allgather_bucket_elements = 0;  // DeepSpeed's allgather_bucket_size (0: one bucket)

  bool overlap_comm = true;                    // DeepSpeed's overlap_comm: bucket reductions overlap backward
  GatherPolicy gather{};                       // ZeRO 3: what stays gathered beyond the running layer
  AllocatorConfig allocator;                   // the caching allocator's settings (FERRY_ALLOC_CONF, PyTorch's keys)
  bool dry_run = false;                        // --device meta
  std::int64_t steps = 0;                      // total, also when resuming
  std::optional<std::int64_t> exit_interval;   // stop (and save) after the first step that is a multiple of it
  std::uint64_t seed = 0;
  GptDropout dropout;
  OptimizerRequest optimizer;                  // the flags' optimizer settings (a resume checks them against its checkpoint)
  int threads = 0;                             // compute threads (0: the machine's cores, shared by its ranks)
  std::int64_t loss_chunk = 0;                 // tokens per LM-head chunk (0: automatic)
  std::int64_t weight_copy_elements = 0;       // 16-bit weights' f32 copies in row slices of at most this (0: whole)
  RunIo io;
  std::vector<std::string> notes;              // settings without effect in this plan, said once at the start

  // How the tied token table's gradient reaches the dp reduction: deferred (slice by slice after the
  // embedding, recomputing the head's logits) at ZeRO 2 without a pipeline when the table has more rows
  // than a micro-batch has tokens (what deferring keeps instead), so no rank holds the table's whole
  // gradient; as computed otherwise (its gradient one bucket of its own).
  TiedTableGradient tied_table_gradient() const;
  // DeepSpeed's train_batch_size identity: micro-batch x micro-batches x dp.
  std::int64_t global_batch() const { return micro_batch * micro_batches * grid.dp; }
  // The data-parallel runtime trains: more than one data-parallel rank, or parameter offload on one (the
  // rank's partition is the whole model, off the device, copied in layer by layer). Otherwise ZeRO on one
  // rank partitions nothing: the one-rank trainer runs, ZeRO-Offload included.
  bool data_parallel() const { return grid.dp > 1 || offload_param.has_value(); }
  // Every rank's allocations are simulated in this process (a dry run of a grid larger than the job).
  bool simulated_ranks() const { return dry_run && world == 1 && grid.world() > 1; }
  nlohmann::json to_json() const;
};

// The most ranks one process dry-runs (each runs a whole training step on meta).
inline constexpr int kMaxSimulatedRanks = 4096;

// DeepSpeed's defaults for reduce_bucket_size and allgather_bucket_size (elements): ferry's upper bound.
inline constexpr std::int64_t kDefaultBucketElements = 500'000'000;

// reduce_bucket_size and allgather_bucket_size when not given: buckets that follow the model, the
// smaller of hidden x hidden (Hugging Face's "auto") and a 128th of a rank's parameters (the model's / pp),
// in whole multiples of 64 elements, at least 64 and at most DeepSpeed's 5e8. The buckets in flight then
// cost a small fraction of what ZeRO's partitions save, whatever the shape: ZeRO 1 and 2 save at least
// 80% of their formulas' bytes at these defaults (tests/cli/zero_defaults_test.sh over GPT shapes).
std::int64_t default_bucket_elements(const GptConfig& model, const GridShape& grid);

// The plan of `options` for a job of `environment`'s world size. Throws std::invalid_argument naming
// the settings that contradict each other (world size against --tp x --pp x --dp, train_batch_size
// against its factors, the parts not built yet) and how to fix it.
// The flags' own checks (ranges, flags that need each other) come first.
TrainingPlan make_training_plan(const TrainOptions& options, const RankEnvironment& environment);

// A cpu device limit past this machine's RAM is allowed (a test of a large configuration may never
// touch it all) but said on stderr, once per machine: the kernel's OOM killer would end the run before
// ferry's advice could.
void warn_about_device_memory(const TrainingPlan& plan, const RankEnvironment& environment);

// Throws std::invalid_argument "FLAG must be positive, got V" unless value > 0.
void require_positive(std::int64_t value, const char* flag);

}  // namespace ferry
