// What `ferry train` and `ferry eval` are asked to do, once parsed: engine/cli/train_flag_parser.h reads the
// flags (ARCHITECTURE.md's contract) and a JSON config into these; the loop reads only these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt_config.h"

#include "engine/optim/optimizer_settings.h"

namespace ferry {

struct TrainOptions {
  std::string config_path;
  std::string plan_path;  // --plan: a `ferry plan --summary` file whose best plan's config applies
  std::string model = "gpt2-tiny";
  bool model_given = false;       // --model was given (a resume checks it against the checkpoint's model)
  std::optional<std::int64_t> layers, hidden, heads, vocab, seq;
  std::string device = "cpu";
  std::string device_memory;  // empty: the device's default
  std::optional<std::string> dry_run_of;  // --dry-run-of cpu | cuda (with --device meta; unset: cpu)
  std::string precision = "fp32";
  std::int64_t batch = 8;
  std::int64_t grad_accum = 1;
  // Given by a flag or the config (DeepSpeed derives the missing factor of train_batch_size).
  bool batch_given = false, grad_accum_given = false;
  std::int64_t steps = 300;
  std::optional<std::int64_t> exit_interval;  // stop (and save) after the first step that is a multiple of it
  OptimizerRequest optimizer;  // schedule, AdamW, clipping, fp16 loss scaling: defaults or the checkpoint's
  std::uint64_t seed = 1337;
  std::string data;  // empty: the embedded corpus
  bool shuffle = true;
  std::string init_from;
  std::string save;
  std::int64_t save_every = 0;
  std::int64_t keep_checkpoints = 0;  // complete checkpoints kept under --save (0: all)
  bool overwrite_checkpoints = false;  // save into a root holding another run's checkpoints
  std::string resume;
  // On resume, the learning-rate schedule from the flags instead of the checkpoint (its horizon: --steps
  // unless --lr-decay-steps); weights, moments, step and data position as saved.
  bool override_lr_schedule = false;
  std::string summary;
  std::string metrics;              // JSON lines, one per step, appended and flushed as training goes
  std::string eval_data;            // validation data: its mean loss every --eval-every steps and at the end
  std::int64_t eval_every = 0;      // 0: at the last step only
  std::int64_t eval_batches = 20;   // micro-batches of the validation data per evaluation (0: all)
  float dropout = 0.0f;
  int threads = 0;  // 0: all cores
  std::int64_t log_every = 10;
  std::string checkpointing = "none";
  std::string offload_optimizer = "none";  // none | cpu | nvme (ZeRO-Offload)
  std::string nvme_path;                   // nvme: directory of the optimizer-state file
  bool offload_pin_memory = true;
  int offload_buffer_count = 4;             // nvme: host buffers, one sub-group each
  std::string offload_buffer_size = "256MiB";  // nvme: all buffers together
  std::int64_t offload_sub_group = 0;       // elements per sub-group; 0: from the buffers (nvme) or 16M (cpu)
  std::optional<std::int64_t> reduce_bucket_size;  // offload: gradient bucket bound in elements (0: whole parameters)
  std::int64_t weight_copy_elements = 0;  // 16-bit weights converted to f32 for matmuls in slices of at most this (0: whole)
  std::int64_t offload_chunk_bytes = 1 << 20;  // nvme: bytes per I/O and per checksum
  int offload_queue_depth = 32;             // nvme: I/Os in flight
  std::string offload_param = "none";       // none | cpu | nvme (ZeRO-Infinity: stage 3's parameter partition off the device)
  std::optional<int> offload_param_buffer_count;          // nvme: host buffers the parameters are read through (default 5)
  std::optional<std::string> offload_param_buffer_size;   // nvme: each of them (default 16MiB)
  std::optional<std::int64_t> offload_param_buffer_elements;  // DeepSpeed's offload_param.buffer_size (elements of the parameters' dtype)
  std::int64_t loss_chunk = 0;  // tokens per LM-head chunk; 0: as many as fit 32 MiB of logits
  std::string profile;          // memory-profile directory
  std::string profile_steps = "3";  // N (the first N steps) or A-B
  std::vector<std::string> notes;  // config keys accepted without effect, said once at the start
  // Pipeline parallelism: --pp stages (one rank each under mpirun, or every stage in this process),
  // --micro-batches per step (default --grad-accum), the schedule's name.
  std::int32_t pipeline_stages = 1;
  // The process grid and ZeRO: --tp, --dp (default: the world / (tp x pp)), --zero-stage; DeepSpeed's
  // allgather_bucket_size and train_batch_size (checked against micro-batch x grad-accum x dp).
  std::int32_t tp = 1;
  std::optional<std::int32_t> dp;
  std::int32_t zero_stage = 0;
  std::optional<std::int64_t> allgather_bucket_size;
  std::optional<std::int64_t> train_batch_size;
  std::optional<bool> overlap_comm;  // default true
  std::optional<bool> reshard_after_forward;  // ZeRO 3 only; default true
  // DeepSpeed's stage3_prefetch_bucket_size (0: no prefetch; else the next layer) and
  // stage3_max_live_parameters (elements kept gathered beyond the running layer; default: no bound).
  std::optional<std::int64_t> stage3_prefetch_bucket_size;
  std::optional<std::int64_t> stage3_max_live_parameters;
  std::optional<std::int64_t> micro_batches;
  std::string schedule = "1f1b";
  bool quiet = false;  // no progress or banner lines (benchmarks run many trainings)
};

struct EvalOptions {
  std::string init_from;
  std::string data;
  std::int64_t batches = 0;  // 0: every micro-batch of the data
  std::int64_t batch = 8;
  std::optional<std::int64_t> seq;
  std::optional<std::int64_t> heads;
  std::string device = "cpu";
  std::string device_memory;
  std::string precision = "fp32";
  std::string summary;
  int threads = 0;
};

}  // namespace ferry
