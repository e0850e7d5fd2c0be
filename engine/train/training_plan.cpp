#include "engine/train/training_plan.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "allocator/byte_size.h"
#include "engine/core/cpu_device.h"
#include "engine/train/training_setup.h"
#include "offload/zero_offload_optimizer.h"

namespace ferry {
namespace {

std::string number(std::int64_t value) { return std::to_string(value); }

// The flags' own ranges and the pairs that need each other (before the grid is looked at).
// Sizes past these are typos, and their products (tokens per step, micro-batches per step) would
// overflow 64 bits: each is refused with its range.
constexpr std::int64_t kMostSequencesPerMicroBatch = std::int64_t{1} << 24;
constexpr std::int64_t kMostMicroBatchesPerStep = std::int64_t{1} << 24;
constexpr std::int64_t kMostSteps = std::int64_t{1} << 40;

void require_at_most(std::int64_t value, std::int64_t most, const char* flag) {
  if (value > most) throw std::invalid_argument(std::string(flag) + " must be at most " + std::to_string(most) + ", got " + std::to_string(value));
}

void validate_options(const TrainOptions& o) {
  require_positive(o.batch, "--batch");
  require_positive(o.grad_accum, "--grad-accum");
  require_at_most(o.batch, kMostSequencesPerMicroBatch, "--batch");
  require_at_most(o.grad_accum, kMostMicroBatchesPerStep, "--grad-accum");
  if (o.micro_batches) require_at_most(*o.micro_batches, kMostMicroBatchesPerStep, "--micro-batches");
  require_at_most(o.steps, kMostSteps, "--steps");
  if (o.steps < 0) throw std::invalid_argument("--steps must be >= 0");
  if (o.save_every < 0) throw std::invalid_argument("--save-every must be >= 0");
  if (o.save_every > 0 && o.save.empty()) throw std::invalid_argument("--save-every needs --save DIR");
  if (o.keep_checkpoints < 0) throw std::invalid_argument("--keep-checkpoints must be >= 0 (0: keep all)");
  if (o.keep_checkpoints > 0 && o.save.empty()) throw std::invalid_argument("--keep-checkpoints needs --save DIR");
  if (o.overwrite_checkpoints && o.save.empty()) throw std::invalid_argument("--overwrite-checkpoints needs --save DIR (the root it may save into)");
  if (o.override_lr_schedule && o.resume.empty()) {
    throw std::invalid_argument("--override-lr-schedule takes a resumed run's schedule from the flags: it needs --resume DIR "
                                "(a new run's schedule comes from the flags already)");
  }
  if (o.reduce_bucket_size && *o.reduce_bucket_size < 0) {
    throw std::invalid_argument("--reduce-bucket-size must be >= 0 elements (0: one whole parameter per bucket), got " +
                                std::to_string(*o.reduce_bucket_size));
  }
  if (o.weight_copy_elements < 0) {
    throw std::invalid_argument("--weight-copy-elements must be >= 0 (0: whole weights), got " + std::to_string(o.weight_copy_elements));
  }
  if (o.eval_every < 0) throw std::invalid_argument("--eval-every must be >= 0 steps (0: at the last step only)");
  if (o.eval_batches < 0) throw std::invalid_argument("--eval-batches must be >= 0 (0: all of --eval-data)");
  if (o.eval_every > 0 && o.eval_data.empty()) throw std::invalid_argument("--eval-every needs --eval-data FILE (the validation data)");
  if (o.exit_interval && *o.exit_interval < 1) {
    throw std::invalid_argument("--exit-interval must be >= 1 step, got " + std::to_string(*o.exit_interval));
  }
  if (o.loss_chunk < 0) throw std::invalid_argument("--loss-chunk must be >= 0 tokens (0: automatic)");
  if (o.offload_optimizer != "none") {
    offload::parse_offload_device(o.offload_optimizer);  // names the choices when wrong
    if (o.device == "meta" && o.offload_optimizer == "nvme") {
      throw std::invalid_argument("--device meta is a dry run: it offloads nothing; use --offload-optimizer cpu to predict the device's peak");
    }
  }
  if (o.offload_optimizer == "nvme" && o.nvme_path.empty()) {
    throw std::invalid_argument("--offload-optimizer nvme needs --nvme-path DIR (a directory on an NVMe drive with room for 12 bytes per parameter)");
  }
  if (o.offload_param != "none" && o.offload_param != "cpu" && o.offload_param != "nvme") {
    throw std::invalid_argument("--offload-param '" + o.offload_param + "' is not one of none, cpu, nvme");
  }
  if (o.device == "meta" && o.offload_param == "nvme") {
    throw std::invalid_argument("--device meta is a dry run: it offloads nothing; use --offload-param cpu to predict the device's peak");
  }
  if (o.offload_param == "nvme" && o.nvme_path.empty()) {
    throw std::invalid_argument("--offload-param nvme needs --nvme-path DIR (a directory on an NVMe drive with room for the rank's parameters)");
  }
  if (o.offload_optimizer != "nvme" && o.offload_param != "nvme" && !o.nvme_path.empty()) {
    throw std::invalid_argument("--nvme-path is for --offload-optimizer nvme or --offload-param nvme (this run offloads neither to nvme)");
  }
  if (o.offload_param == "nvme" && !o.offload_param_buffer_elements && o.offload_param_buffer_size &&
      parse_byte_size(*o.offload_param_buffer_size) < static_cast<std::size_t>(o.offload_chunk_bytes)) {
    const std::string chunk = format_bytes(static_cast<std::size_t>(o.offload_chunk_bytes));
    throw std::invalid_argument("--offload-param-buffer-size " + *o.offload_param_buffer_size + " is less than one " + chunk +
                                " I/O chunk (aio.block_size): give at least " + chunk);
  }
  if (o.offload_param_buffer_count.value_or(5) < 1) throw std::invalid_argument("--offload-param-buffer-count must be >= 1 (5 lets a layer's reads overlap)");
  if (o.offload_buffer_count < 2) throw std::invalid_argument("--offload-buffer-count must be >= 2 (4 lets reads, updates and writes overlap)");
  if (o.offload_sub_group < 0) throw std::invalid_argument("--offload-sub-group must be >= 0 elements (0: automatic)");
  if (parse_byte_size(o.offload_buffer_size) > physical_memory_bytes() / 2) {
    throw std::invalid_argument("--offload-buffer-size " + o.offload_buffer_size + " is more than half of this machine's " +
                                format_bytes(physical_memory_bytes()) + " of RAM: the buffers are pinned (locked) host memory; give at most " +
                                format_bytes(physical_memory_bytes() / 2) + " (default 256MiB)");
  }
  if (o.offload_queue_depth < 1) throw std::invalid_argument("--offload-queue-depth must be >= 1");
  if (o.offload_chunk_bytes < 4096 || o.offload_chunk_bytes % 4096 != 0) {
    throw std::invalid_argument("aio.block_size must be a positive multiple of 4096 bytes, got " + std::to_string(o.offload_chunk_bytes));
  }
}

}  // namespace

nlohmann::json TrainingPlan::to_json() const {
  return {{"tp", grid.tp},
          {"dp", grid.dp},
          {"pp", grid.pp},
          {"world", world},
          {"micro_batch", micro_batch},
          {"micro_batches", micro_batches},
          {"pipeline_schedule", grid.pp > 1 ? nlohmann::json(pipeline_schedule) : nlohmann::json(nullptr)},
          {"global_batch", global_batch()},
          {"precision", std::string(dtype_name(precision))},
          {"zero_stage", zero_stage},
          {"offload_optimizer", offload_optimizer ? offload::offload_device_name(*offload_optimizer) : "none"},
          {"offload_param", offload_param ? (offload_param->nvme ? "nvme" : "cpu") : "none"},
          {"checkpointing", recompute.name()},
          {"tied_table_gradient", tied_table_gradient() == TiedTableGradient::deferred ? "deferred" : "as_computed"},
          {"reduce_bucket_elements", reduce_bucket_elements},
          {"allgather_bucket_elements", allgather_bucket_elements},
          {"overlap_comm", overlap_comm},
          {"reshard_after_forward", gather.reshard_after_forward},
          {"stage3_prefetch", gather.prefetch},
          {"stage3_max_live_parameters", gather.max_live_elements},
          {"allocator", allocator.to_string()},
          {"dry_run", dry_run}};
}

namespace {

// Stage 3's gather policy from --reshard-after-forward and DeepSpeed's stage-3 keys. A prefetch bucket of
// 0 elements turns prefetching off; any other (Hugging Face's "auto" too) prefetches the next layer, the
// most ferry gathers ahead. No live-parameter bound unless one is given (DeepSpeed's 1e9 would stop a
// layer of more than 1e9 elements from being prefetched, which ferry's own default never does).
GatherPolicy gather_policy(const TrainOptions& o) {
  GatherPolicy policy;
  policy.reshard_after_forward = o.reshard_after_forward.value_or(true);
  policy.prefetch = o.stage3_prefetch_bucket_size.value_or(1) != 0;
  if (o.stage3_max_live_parameters) policy.max_live_elements = *o.stage3_max_live_parameters;
  return policy;
}

// DeepSpeed's train_batch_size = micro-batch x gradient_accumulation_steps x dp, with a factor not given
// (by a flag or a config key) derived as DeepSpeed derives it: the micro-batch from the other two, the
// accumulation from the micro-batch, or, with neither, accumulation 1. A size the factors do not divide
// names them.
void derive_batch_factors(const TrainOptions& o, std::int64_t train_batch, TrainingPlan& plan) {
  const bool accumulation_given = o.grad_accum_given || o.micro_batches.has_value();
  if (o.batch_given && accumulation_given) return;  // checked against the product
  const std::int64_t dp = plan.grid.dp;
  const auto divide = [&](std::int64_t by, const std::string& what) {
    if (train_batch <= 0 || train_batch % by != 0) {
      throw std::invalid_argument("train_batch_size " + number(train_batch) + " is not a multiple of " + what + " = " + number(by) +
                                  ": give a train_batch_size it divides, or both train_micro_batch_size_per_gpu and gradient_accumulation_steps");
    }
    return train_batch / by;
  };
  if (o.batch_given) {
    plan.micro_batches = divide(plan.micro_batch * dp, "train_micro_batch_size_per_gpu (--batch) " + number(plan.micro_batch) + " x " + number(dp) +
                                                           " data-parallel ranks");
  } else if (accumulation_given) {
    plan.micro_batch = divide(plan.micro_batches * dp, "gradient_accumulation_steps (--grad-accum) " + number(plan.micro_batches) + " x " +
                                                           number(dp) + " data-parallel ranks");
  } else {
    plan.micro_batches = 1;
    plan.micro_batch = divide(dp, number(dp) + " data-parallel ranks");
  }
  plan.notes.push_back("train_batch_size " + number(train_batch) + " = micro-batch " + number(plan.micro_batch) + " x accumulation " +
                       number(plan.micro_batches) + " x " + number(dp) + " data-parallel ranks (the factors not given derived, as DeepSpeed does)");
}

}  // namespace

void require_positive(std::int64_t value, const char* flag) {
  if (value <= 0) throw std::invalid_argument(std::string(flag) + " must be positive, got " + std::to_string(value));
}

TrainingPlan make_training_plan(const TrainOptions& o, const RankEnvironment& environment) {
  validate_options(o);
  TrainingPlan plan;
  const RunShape shape = run_shape(o);
  plan.model = shape.config;
  plan.sequence = shape.sequence;
  plan.dry_run = o.device == "meta";
  plan.world = environment.world_size;
  plan.micro_batch = o.batch;
  if (o.micro_batches && o.grad_accum != 1 && *o.micro_batches != o.grad_accum) {
    throw std::invalid_argument("--micro-batches " + number(*o.micro_batches) + " and --grad-accum " + number(o.grad_accum) +
                                " disagree: both are the micro-batches of a step (give one of the two)");
  }
  plan.micro_batches = o.micro_batches.value_or(o.grad_accum);
  require_positive(plan.micro_batches, "--micro-batches");
  plan.pipeline_schedule = o.schedule;
  plan.precision = parse_precision(o.precision);
  plan.zero_stage = o.zero_stage;
  plan.overlap_comm = o.overlap_comm.value_or(true);
  plan.gather = gather_policy(o);
  if (o.offload_optimizer != "none") plan.offload_optimizer = offload::parse_offload_device(o.offload_optimizer);
  plan.offload = offload_settings(o, plan.offload_optimizer.value_or(offload::OffloadDevice::cpu));
  plan.device = parse_device_kind(o.device);
  plan.device_memory_limit = o.device_memory.empty() ? 0 : parse_byte_size(o.device_memory);
  if (!o.device_memory.empty() && plan.device_memory_limit == 0) {
    throw std::invalid_argument("--device-memory " + o.device_memory +
                                ": a device needs memory; give a size such as 512MiB, or leave the flag out for the device's own");
  }
  plan.recompute = RecomputePolicy::parse(o.checkpointing);
  const std::int64_t blocks = plan.model.layers;
  if (plan.recompute.kind == RecomputeKind::first && plan.recompute.every > blocks) {
    throw std::invalid_argument("--checkpointing " + o.checkpointing + ": the model has " + number(blocks) + " blocks, so first:" + number(blocks) +
                                " is the most (every block: --checkpointing full)");
  }
  if (plan.recompute.kind == RecomputeKind::every && plan.recompute.every > blocks) {
    throw std::invalid_argument("--checkpointing " + o.checkpointing + ": the model has " + number(blocks) + " blocks, so every:" +
                                number(plan.recompute.every) + " recomputes none of them; give every:K with K at most " + number(blocks));
  }
  plan.kernels = plan.device;
  if (o.dry_run_of) {
    if (plan.device != DeviceKind::meta) {
      throw std::invalid_argument("--dry-run-of " + *o.dry_run_of + " is for a dry run: add --device meta, or drop --dry-run-of to train on --device " + o.device);
    }
    if (*o.dry_run_of != "cpu" && *o.dry_run_of != "cuda") {
      throw std::invalid_argument("--dry-run-of '" + *o.dry_run_of + "': a dry run predicts cpu or cuda");
    }
    plan.kernels = parse_device_kind(*o.dry_run_of);
  } else if (plan.device == DeviceKind::meta) {
    plan.kernels = DeviceKind::cpu;
  }
  // A dry run allocates as the device it predicts: that kind's allocator defaults and kernel sizes.
  plan.allocator = with_device_defaults(AllocatorConfig::from_environment(), plan.device == DeviceKind::meta ? plan.kernels : plan.device);
  plan.steps = o.steps;
  plan.exit_interval = o.exit_interval;
  plan.seed = o.seed;
  plan.dropout = GptDropout{o.dropout, o.dropout, o.dropout};
  plan.optimizer = o.optimizer;
  plan.threads = o.threads;
  plan.loss_chunk = o.loss_chunk;
  plan.weight_copy_elements = o.weight_copy_elements;
  plan.io = RunIo{o.data, o.shuffle, o.eval_data, o.eval_every, o.eval_batches, o.init_from, o.resume, o.override_lr_schedule, o.save,
                  o.save_every, o.keep_checkpoints, o.overwrite_checkpoints, o.metrics, o.profile, ProfileSteps::parse(o.profile_steps), o.log_every, o.quiet};
  plan.grid.tp = o.tp;
  plan.grid.pp = o.pipeline_stages;
  if (o.tp < 1) throw std::invalid_argument("--tp must be at least 1, got " + number(o.tp));
  if (o.pipeline_stages < 1) throw std::invalid_argument("--pp must be at least 1, got " + number(o.pipeline_stages));
  if (o.dp && *o.dp < 1) throw std::invalid_argument("--dp must be at least 1, got " + number(*o.dp));
  if (o.tp > 1) {
    throw std::invalid_argument("--tp " + number(o.tp) + ": tensor parallelism is not built yet; train with --tp 1 (data and pipeline "
                                "parallelism are: --dp, --pp)");
  }
  const int model_parallel = o.tp * o.pipeline_stages;
  if (plan.world > 1) {
    if (plan.world % model_parallel != 0) {
      throw std::invalid_argument("the job has " + number(plan.world) + " ranks, which --tp " + number(o.tp) + " x --pp " +
                                  number(o.pipeline_stages) + " does not divide: launch a multiple of " + number(model_parallel) + " ranks (mpirun -np " +
                                  number(model_parallel) + ", or -np " + number(2 * model_parallel) + " for dp 2)");
    }
    plan.grid.dp = plan.world / model_parallel;
    if (o.dp && *o.dp != plan.grid.dp) {
      throw std::invalid_argument("--dp " + number(*o.dp) + " contradicts the job: " + number(plan.world) + " ranks / (--tp " + number(o.tp) +
                                  " x --pp " + number(o.pipeline_stages) + ") = dp " + number(plan.grid.dp) +
                                  "; launch " + number(*o.dp * model_parallel) + " ranks or drop --dp");
    }
  } else {
    plan.grid.dp = o.dp.value_or(1);
  }
  if (plan.simulated_ranks() && plan.grid.world() > kMaxSimulatedRanks) {
    throw std::invalid_argument("a dry run of " + number(plan.grid.world()) + " ranks in one process: at most " + number(kMaxSimulatedRanks) +
                                " are simulated (ranks of a dp group differ only in their partition: a smaller --dp shows the same shape)");
  }
  if (plan.world == 1 && plan.grid.world() > 1 && !plan.dry_run) {
    throw std::invalid_argument("the grid " + plan.grid.text() + " (--dp " + number(plan.grid.dp) + ", --pp " + number(plan.grid.pp) + ") needs " +
                                number(plan.grid.world()) + " ranks, one process each: launch with `mpirun -np " + number(plan.grid.world()) +
                                " ferry train ...`, or add --device meta for a dry run of every rank in this process");
  }
  if (plan.dry_run && plan.world > 1) {
    throw std::invalid_argument("--device meta under a launcher of " + number(plan.world) + " ranks: a dry run of every rank of a grid runs "
                                "in one process; drop mpirun and give the grid (--dp, --pp)");
  }
  if (o.zero_stage < 0 || o.zero_stage > 3) throw std::invalid_argument("--zero-stage must be 0, 1, 2 or 3, got " + number(o.zero_stage));
  if (o.reshard_after_forward && o.zero_stage != 3) {
    throw std::invalid_argument("--reshard-after-forward is ZeRO stage 3's (only stage 3 gathers parameters per block); add --zero-stage 3 or drop it");
  }
  for (const auto& [flag, value] : {std::pair{"--stage3-prefetch-bucket-size (zero_optimization.stage3_prefetch_bucket_size)", o.stage3_prefetch_bucket_size},
                                    std::pair{"--stage3-max-live-parameters (zero_optimization.stage3_max_live_parameters)", o.stage3_max_live_parameters}}) {
    if (!value) continue;
    if (*value < 0) throw std::invalid_argument(std::string(flag) + " must be 0 or more elements, got " + number(*value));
    if (o.zero_stage != 3) {
      throw std::invalid_argument(std::string(flag) + " is ZeRO stage 3's (only stage 3 gathers parameters per block); add --zero-stage 3 or drop it");
    }
  }
  if (o.offload_param != "none") {
    if (o.zero_stage != 3) {
      throw std::invalid_argument("--offload-param " + o.offload_param + " (zero_optimization.offload_param) offloads ZeRO stage 3's parameter "
                                  "partition: add --zero-stage 3");
    }
    if (o.offload_optimizer == "none") {
      throw std::invalid_argument("--offload-param " + o.offload_param + " needs --offload-optimizer cpu or nvme: the optimizer steps the "
                                  "parameters where they live, on the host");
    }
    offload::ParameterOffloadSettings param;
    param.nvme = o.offload_param == "nvme";
    param.nvme_path = param.nvme ? o.nvme_path : std::string();
    param.pin_memory = o.offload_pin_memory;
    param.buffer_count = o.offload_param_buffer_count.value_or(param.buffer_count);
    if (o.offload_param_buffer_elements) {
      param.buffer_bytes = static_cast<std::size_t>(*o.offload_param_buffer_elements) * dtype_size(plan.precision);
    } else if (o.offload_param_buffer_size) {
      param.buffer_bytes = parse_byte_size(*o.offload_param_buffer_size);
    }
    param.queue_depth = static_cast<unsigned>(o.offload_queue_depth);
    param.chunk_bytes = static_cast<std::size_t>(o.offload_chunk_bytes);
    const std::size_t pinned = param.buffer_bytes * static_cast<std::size_t>(param.buffer_count);
    if (param.nvme && pinned > physical_memory_bytes() / 2) {
      throw std::invalid_argument("--offload-param-buffer-count " + number(param.buffer_count) + " x --offload-param-buffer-size " +
                                  format_bytes(param.buffer_bytes) + " = " + format_bytes(pinned) + " is more than half of this machine's " +
                                  format_bytes(physical_memory_bytes()) + " of RAM: the buffers are pinned (locked) host memory; lower either");
    }
    plan.offload_param = param;
  }
  if (o.offload_param != "nvme" && (o.offload_param_buffer_count || o.offload_param_buffer_size || o.offload_param_buffer_elements)) {
    plan.notes.push_back("--offload-param-buffer-count and --offload-param-buffer-size (offload_param.buffer_count, buffer_size) have no "
                         "effect without --offload-param nvme: only the NVMe home reads the parameters through buffers");
  }
  if (o.zero_stage > 0 && plan.grid.dp == 1 && !plan.offload_param) {
    plan.notes.push_back("--zero-stage " + number(o.zero_stage) + " (zero_optimization.stage) partitions nothing on one data-parallel rank: " +
                         (o.offload_optimizer != "none" ? std::string("ZeRO-Offload streams the gradients to the host as on one rank")
                                                        : std::string("the optimizer state stays whole on the device")));
  }
  if (o.overlap_comm && plan.grid.dp == 1) {
    plan.notes.push_back("zero_optimization.overlap_comm has no effect on one data-parallel rank: there are no gradient reductions to overlap");
  }
  if (o.train_batch_size) derive_batch_factors(o, *o.train_batch_size, plan);
  if (o.train_batch_size && *o.train_batch_size != plan.global_batch()) {
    throw std::invalid_argument("train_batch_size " + number(*o.train_batch_size) + " != train_micro_batch_size_per_gpu (--batch) " +
                                number(plan.micro_batch) + " x gradient_accumulation_steps (--grad-accum) " + number(plan.micro_batches) +
                                " x " + number(plan.grid.dp) + " data-parallel ranks = " + number(plan.global_batch()));
  }
  const std::int64_t model_buckets = default_bucket_elements(plan.model, plan.grid);
  const std::int64_t reduce = o.reduce_bucket_size.value_or(plan.data_parallel() ? model_buckets : 0);
  if (reduce < 0) throw std::invalid_argument("--reduce-bucket-size must be >= 0 elements, got " + number(reduce));
  plan.reduce_bucket_elements = reduce;
  plan.allgather_bucket_elements = o.allgather_bucket_size.value_or(model_buckets);
  if (plan.allgather_bucket_elements < 0) {
    throw std::invalid_argument("--allgather-bucket-size must be >= 0 elements, got " + number(plan.allgather_bucket_elements));
  }
  std::vector<std::string> notes = run_notes(o, plan.grid.dp);  // the config's and the flags', then the grid's
  notes.insert(notes.end(), plan.notes.begin(), plan.notes.end());
  plan.notes = std::move(notes);
  return plan;
}

TiedTableGradient TrainingPlan::tied_table_gradient() const {
  const bool deferred = data_parallel() && zero_stage >= 2 && grid.pp == 1 && model.vocab > micro_batch * sequence;
  return deferred ? TiedTableGradient::deferred : TiedTableGradient::as_computed;
}

std::int64_t default_bucket_elements(const GptConfig& model, const GridShape& grid) {
  constexpr std::int64_t kAlignment = 64;
  const std::int64_t by_width = model.hidden * model.hidden;
  const std::int64_t by_rank = model.parameter_count() / (128 * std::max(grid.pp, 1));
  const std::int64_t elements = std::min(by_width, by_rank) / kAlignment * kAlignment;
  return std::clamp(elements, kAlignment, kDefaultBucketElements);
}

void warn_about_device_memory(const TrainingPlan& plan, const RankEnvironment& environment) {
  if (plan.device != DeviceKind::cpu || plan.device_memory_limit == 0 || environment.local_rank != 0) return;
  const std::size_t physical = physical_memory_bytes();
  const auto ranks = static_cast<std::size_t>(environment.local_size);
  if (plan.device_memory_limit <= physical / ranks) return;
  const std::string each = ranks > 1 ? " on each of " + std::to_string(ranks) + " ranks" : "";
  std::fprintf(stderr,
               "ferry: warning: --device-memory %s%s exceeds this machine's %s of RAM: the kernel's out-of-memory killer may end "
               "the run before ferry can report; without --device-memory the cpu device takes %s (three quarters of the RAM%s)\n",
               format_bytes(plan.device_memory_limit).c_str(), each.c_str(), format_bytes(physical).c_str(),
               format_bytes(default_cpu_device_memory(environment.local_size)).c_str(), ranks > 1 ? ", shared by the ranks" : "");
}

}  // namespace ferry
