#include "engine/cli/train_flag_parser.h"
#include "engine/cli/empty_values.h"
#include "engine/core/bounded_json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/core/atomic_file.h"
#include "engine/cli/command_suggestions.h"
#include "engine/cli/config_keys.h"
#include "engine/cli/zero_config.h"

namespace ferry {
namespace {

using nlohmann::json;
using config::reject_unknown;
using config::value_of;

// A seed is a whole number of 64 bits: CLI11 would wrap -1 and saturate what overflows.
const CLI::Validator kSeedValue(
    [](const std::string& text) -> std::string {
      std::uint64_t value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
        return "'" + text + "' is not a seed: give a whole number from 0 to 18446744073709551615";
      }
      return {};
    },
    "SEED");

// true or false (1 or 0): CLI11 reads any other number as true.
const CLI::Validator kTrueOrFalse(
    [](std::string text) -> std::string {
      std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (text == "true" || text == "false" || text == "1" || text == "0") return {};
      return "'" + text + "' is neither true nor false (1 or 0)";
    },
    "BOOL");

// ferry's own section takes every flag of `ferry train`, named with underscores: {"device_memory":
// "2GiB"} is --device-memory 2GiB. It becomes flags placed before the command line's, so those override.
std::vector<std::string> ferry_section_flags(const json& section) {
  if (!section.is_object()) throw std::invalid_argument("config key 'ferry' must be an object of flag names and values");
  std::vector<std::string> flags;
  for (const auto& [key, value] : section.items()) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::string text;
    if (value.is_string()) text = value.get<std::string>();
    else if (value.is_boolean()) text = value.get<bool>() ? "true" : "false";
    else if (value.is_number()) text = value.dump();
    else throw std::invalid_argument("config key 'ferry." + key + "' must be a string, number or boolean, got " + value.dump());
    flags.push_back(flag);
    flags.push_back(text);
  }
  return flags;
}

// DeepSpeed's fp16 section: enabled selects --precision fp16 (with bf16 also enabled, the config is
// ambiguous and refused); the loss-scaling keys keep DeepSpeed's names and meanings.
void apply_fp16(const json& section, const std::string& path, TrainOptions& options) {
  reject_unknown(section, "fp16", {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"});
  if (!value_of<bool>(section.value("enabled", json(false)), "fp16.enabled")) return;
  if (options.precision == "bf16") {
    throw std::invalid_argument("config '" + path + "': both bf16 and fp16 are enabled; enable one of them");
  }
  options.precision = "fp16";
  OptimizerRequest& scaling = options.optimizer;
  if (section.contains("loss_scale")) scaling.loss_scale = value_of<double>(section["loss_scale"], "fp16.loss_scale");
  if (section.contains("initial_scale_power")) scaling.initial_scale_power = value_of<std::int32_t>(section["initial_scale_power"], "fp16.initial_scale_power");
  if (section.contains("loss_scale_window")) scaling.loss_scale_window = value_of<std::int32_t>(section["loss_scale_window"], "fp16.loss_scale_window");
  if (section.contains("hysteresis")) scaling.hysteresis = value_of<std::int32_t>(section["hysteresis"], "fp16.hysteresis");
  if (section.contains("min_loss_scale")) scaling.min_loss_scale = value_of<double>(section["min_loss_scale"], "fp16.min_loss_scale");
}

// DeepSpeed's activation_checkpointing section: its models checkpoint every block's input, which is
// ferry's full recompute. Options that need what ferry lacks are refused, not ignored.
void apply_activation_checkpointing(const json& section, TrainOptions& options) {
  reject_unknown(section, "activation_checkpointing",
                 {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization", "number_checkpoints",
                  "synchronize_checkpoint_boundary", "profile"});
  const auto enabled = [&](const char* key) {
    return section.contains(key) && value_of<bool>(section[key], std::string("activation_checkpointing.") + key);
  };
  if (enabled("partition_activations")) {
    throw std::invalid_argument("activation_checkpointing.partition_activations splits checkpoints across tensor-parallel ranks; "
                                "ferry has no tensor parallelism yet: set it to false");
  }
  if (enabled("cpu_checkpointing")) {
    throw std::invalid_argument("activation_checkpointing.cpu_checkpointing (checkpoints in host memory) is not supported: set it to "
                                "false; full recompute already keeps only one [batch, seq, hidden] input per block");
  }
  if (enabled("contiguous_memory_optimization")) {
    throw std::invalid_argument("activation_checkpointing.contiguous_memory_optimization is not supported: set it to false "
                                "(ferry's caching allocator places block inputs itself; see the fragmentation in `ferry report`)");
  }
  for (const char* key : {"number_checkpoints", "synchronize_checkpoint_boundary", "profile"}) {
    if (section.contains(key)) options.notes.push_back(std::string("activation_checkpointing.") + key + " has no effect in ferry");
  }
  options.checkpointing = "full";
}

// Megatron's recompute_granularity / recompute_method / recompute_num_layers, as config keys.
void apply_megatron_recompute(const json& config, TrainOptions& options) {
  const std::string granularity = value_of<std::string>(config.value("recompute_granularity", json("full")), "recompute_granularity");
  const std::string method = value_of<std::string>(config.value("recompute_method", json("uniform")), "recompute_method");
  const auto layers = value_of<std::int64_t>(config.value("recompute_num_layers", json(1)), "recompute_num_layers");
  if (layers < 1) throw std::invalid_argument("recompute_num_layers must be >= 1, got " + std::to_string(layers));
  if (granularity == "selective") {
    if (config.contains("recompute_method") || config.contains("recompute_num_layers")) {
      throw std::invalid_argument("recompute_method and recompute_num_layers apply to recompute_granularity \"full\" only (as in Megatron)");
    }
    options.checkpointing = "selective";
  } else if (granularity == "full") {
    if (method == "uniform") {
      if (layers != 1) {
        throw std::invalid_argument("recompute_method \"uniform\" with recompute_num_layers " + std::to_string(layers) +
                                    " keeps one input per group of layers; ferry recomputes per block: use recompute_num_layers 1, "
                                    "or \"block\" to recompute the first N blocks");
      }
      options.checkpointing = "full";
    } else if (method == "block") {
      options.checkpointing = "first:" + std::to_string(layers);
    } else {
      throw std::invalid_argument("recompute_method '" + method + "' is not one of uniform, block");
    }
  } else {
    throw std::invalid_argument("recompute_granularity '" + granularity + "' is not one of full, selective");
  }
}

void apply_scheduler(const json& scheduler, TrainOptions& options) {
  reject_unknown(scheduler, "scheduler", {"type", "params"});
  const std::string type = value_of<std::string>(scheduler.value("type", json("WarmupLR")), "scheduler.type");
  const json params = scheduler.value("params", json::object());
  if (type == "WarmupLR") {
    reject_unknown(params, "scheduler.params", {"warmup_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_type"});
    options.optimizer.lr_schedule = "constant";
  } else if (type == "WarmupCosineLR") {
    reject_unknown(params, "scheduler.params", {"warmup_num_steps", "total_num_steps", "warmup_min_ratio", "cos_min_ratio", "warmup_type"});
    options.optimizer.lr_schedule = "cosine";
    if (params.contains("cos_min_ratio")) {
      options.optimizer.min_lr_ratio = value_of<double>(params["cos_min_ratio"], "scheduler.params.cos_min_ratio");
    }
    if (params.contains("total_num_steps")) {
      options.optimizer.lr_decay_steps = value_of<std::int64_t>(params["total_num_steps"], "scheduler.params.total_num_steps");
    }
  } else {
    throw std::invalid_argument("scheduler type '" + type + "' is not supported (WarmupLR, WarmupCosineLR)");
  }
  if (params.contains("warmup_num_steps")) {
    options.optimizer.warmup_steps = value_of<std::int64_t>(params["warmup_num_steps"], "scheduler.params.warmup_num_steps");
  }
  if (params.contains("warmup_max_lr")) options.optimizer.lr = value_of<double>(params["warmup_max_lr"], "scheduler.params.warmup_max_lr");
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainOptions& o) {
  CLI::App* train = app.add_subcommand("train", "Train a GPT model (default: gpt2-tiny on the embedded corpus, cpu device)");
  train->add_option("--config", o.config_path, "JSON config (DeepSpeed keys + a \"ferry\" section); flags override it");
  train->add_option("--plan", o.plan_path, "Train the best fitting plan of a `ferry plan --summary` file (its grid, micro-batch, recompute, "
                                           "ZeRO stage, offload, device and memory; it overrides --config, flags override it), or `auto`: "
                                           "plan the launched cpu ranks at this --device-memory and train the best (it sets the grid, "
                                           "--batch, --grad-accum, --checkpointing, --zero-stage, --offload-optimizer, --offload-param)");
  train->add_option("--model", o.model, "Preset: gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-small ... gpt3-30b, gpt3-175b")
      ->each([&o](const std::string&) { o.model_given = true; });
  train->add_option("--layers", o.layers, "Transformer blocks (overrides the preset)");
  train->add_option("--hidden", o.hidden, "Hidden width (overrides the preset)");
  train->add_option("--heads", o.heads, "Attention heads (overrides the preset)");
  train->add_option("--vocab", o.vocab, "Vocabulary size (overrides the preset)");
  train->add_option("--seq", o.seq, "Sequence length per micro-batch (default: the model's positions)");
  train->add_option("--device", o.device, "cpu | cuda (one GPU) | meta (dry run: same allocations, no compute)");
  train->add_option("--device-memory", o.device_memory, "Device memory limit, e.g. 512MiB, 2GiB");
  train->add_option("--dry-run-of", o.dry_run_of,
                    "With --device meta: the device the dry run predicts, cpu (default) or cuda (its kernels' workspaces and its "
                    "allocator defaults, so the peaks are a --device cuda run's)");
  train->add_option("--precision", o.precision,
                    "fp32 | bf16 | fp16 (16-bit parameters and activations, fp32 master weights and gradients; fp16 with loss scaling)");
  // Optimizer settings have no CLI default: unset, they are the defaults named here, or on --resume the
  // checkpoint's (a value that contradicts the checkpoint is an error).
  OptimizerRequest& optimizer = o.optimizer;
  train->add_option("--loss-scale", optimizer.loss_scale, "fp16: 0 = dynamic loss scaling, > 0 = this static scale (default 0)");
  train->add_option("--initial-scale-power", optimizer.initial_scale_power, "fp16 dynamic scaling starts at 2^this (default 16)");
  train->add_option("--loss-scale-window", optimizer.loss_scale_window,
                    "fp16: double the scale after this many steps without overflow (default 1000)");
  train->add_option("--hysteresis", optimizer.hysteresis, "fp16: overflowing steps (skipped) before the scale halves (default 2)");
  train->add_option("--min-loss-scale", optimizer.min_loss_scale, "fp16: the dynamic scale never goes below this (default 1)");
  train->add_option("--batch", o.batch, "Micro-batch size (sequences)")->each([&o](const std::string&) { o.batch_given = true; });
  train->add_option("--grad-accum", o.grad_accum, "Micro-batches per optimizer step")->each([&o](const std::string&) { o.grad_accum_given = true; });
  train->add_option("--steps", o.steps, "Total optimizer steps (a resumed run continues up to this count)");
  train->add_option("--exit-interval", o.exit_interval,
                    "Stop after the first step that is a multiple of K, saving when --save is given (Megatron's --exit-interval)");
  train->add_option("--lr", optimizer.lr, "Peak learning rate (default 1e-3)");
  train->add_option("--lr-schedule", optimizer.lr_schedule, "constant | cosine (to lr * min-lr-ratio), after linear warmup (default cosine)");
  train->add_option("--warmup-steps", optimizer.warmup_steps, "Linear warmup steps (default 0)");
  train->add_option("--lr-decay-steps", optimizer.lr_decay_steps,
                    "The step the cosine decay ends at, warmup included (default: --steps of the run that starts from scratch)");
  train->add_option("--min-lr-ratio", optimizer.min_lr_ratio, "Final learning rate of the cosine schedule, as a fraction of --lr (default 0.1)");
  train->add_option("--weight-decay", optimizer.weight_decay, "AdamW weight decay, 2-D weights only (default 0.1)");
  train->add_option("--betas", optimizer.betas, "AdamW betas as B1,B2 (default 0.9,0.95)");
  train->add_option("--eps", optimizer.eps, "AdamW epsilon (default 1e-8)");
  train->add_option("--grad-clip", optimizer.grad_clip, "Clip the global gradient norm to this, 0 disables (default 1)");
  train->add_option("--seed", o.seed, "Seed for initialization, data order and dropout")->check(kSeedValue);
  train->add_option("--data", o.data, "llm.c token shard (.bin) or plain text; default: the embedded corpus");
  train->add_option("--shuffle", o.shuffle, "true | false: shuffled micro-batch order (seeded) or file order");
  train->add_option("--init-from", o.init_from, "Start from Hugging Face GPT-2 safetensors (config.json beside it is read)");
  train->add_option("--save", o.save, "Checkpoint root: DIR/step-N written at the end (and every --save-every steps), DIR/latest links the newest");
  train->add_option("--save-every", o.save_every, "Also checkpoint every N steps (0: only at the end)");
  train->add_option("--keep-checkpoints", o.keep_checkpoints, "Keep the newest N checkpoints under --save, removing older ones (0: keep all)");
  train->add_flag("--overwrite-checkpoints", o.overwrite_checkpoints,
                  "Save into a --save root that holds another run's checkpoints (refused without it: a new run would overwrite them, "
                  "and --keep-checkpoints delete them)");
  train->add_option("--resume", o.resume, "Continue from a checkpoint: a --save root (its latest) or one step-N directory");
  train->add_flag("--override-lr-schedule", o.override_lr_schedule,
                  "With --resume: take the learning-rate schedule (--lr, --lr-schedule, --warmup-steps, --lr-decay-steps, default --steps, "
                  "--min-lr-ratio) from the flags instead of the checkpoint, keeping the weights, moments, step and data position "
                  "(Megatron's --override-opt_param-scheduler)");
  train->add_option("--summary", o.summary, "Write the run's summary JSON here");
  train->add_option("--metrics", o.metrics, "Append one JSON line per step here (loss, lr, grad norm, tokens/s, memory by category), flushed each step");
  train->add_option("--eval-data", o.eval_data, "Validation data (llm.c shard or text): its mean loss every --eval-every steps and at the end");
  train->add_option("--eval-every", o.eval_every, "Evaluate on --eval-data every N steps (0: at the last step only)");
  train->add_option("--eval-batches", o.eval_batches, "Micro-batches of --eval-data per evaluation (0: all of it)");
  train->add_option("--dropout", o.dropout, "Dropout probability for embeddings, attention and residuals (default 0)");
  train->add_option("--threads", o.threads, "Compute threads (0: all cores)");
  train->add_option("--log-every", o.log_every, "Print a progress line every N steps when not on a terminal");
  train->add_option("--checkpointing", o.checkpointing,
                    "Activation recompute: none | full | selective | every:K | first:N | auto (least recompute that fits --device-memory)");
  train->add_option("--loss-chunk", o.loss_chunk, "Tokens per LM-head + cross-entropy chunk (0: as many as fit 32 MiB of logits on cpu, 128 MiB on cuda)");
  train->add_option("--pp", o.pipeline_stages,
                    "Pipeline stages: under `mpirun -np P` one per rank, else all P in this process (one device each)");
  train->add_option("--tp", o.tp, "Tensor-parallel size (only 1 is built so far)");
  train->add_option("--dp", o.dp,
                    "Data-parallel size (default: the launched ranks / (tp x pp)); with --device meta and no launcher, a dry run "
                    "of every rank in this process");
  train->add_option("--zero-stage", o.zero_stage,
                    "ZeRO stage for data parallelism: 0 (gradients all-reduced), 1 (optimizer state partitioned), 2 (and gradients), "
                    "3 (and parameters, gathered block by block); zero_optimization.stage");
  train->add_option("--allgather-bucket-size", o.allgather_bucket_size,
                    "ZeRO 1/2: updated parameters are gathered in buckets of at most this many elements (DeepSpeed's "
                    "allgather_bucket_size; default: the smaller of hidden^2 and a 128th of a rank's parameters)");
  train->add_option("--overlap-comm", o.overlap_comm,
                    "Data parallelism: reduce gradient buckets while backward goes on (true, default) or wait for each at once (false); "
                    "zero_optimization.overlap_comm")
      ->check(kTrueOrFalse);
  train->add_option("--reshard-after-forward", o.reshard_after_forward,
                    "ZeRO 3: free a block's gathered parameters after its forward and gather them again for its backward (true, "
                    "default), or keep them from forward to backward (false: less gather traffic, every block held at the peak); "
                    "PyTorch FSDP2's reshard_after_forward")
      ->check(kTrueOrFalse);
  train->add_option("--stage3-prefetch-bucket-size", o.stage3_prefetch_bucket_size,
                    "ZeRO 3: 0 gathers each layer's parameters when it starts; any other number of elements gathers the next "
                    "layer's while this one runs (default; one layer ahead at most); zero_optimization.stage3_prefetch_bucket_size");
  train->add_option("--stage3-max-live-parameters", o.stage3_max_live_parameters,
                    "ZeRO 3: at most this many elements stay gathered beyond the running layer (blocks kept for their backward, "
                    "the prefetched layer); a block that would pass it is resharded, a prefetch skipped (default: no bound); "
                    "zero_optimization.stage3_max_live_parameters");
  train->add_option("--micro-batches", o.micro_batches, "Micro-batches per step through the pipeline (default: --grad-accum)");
  train->add_option("--schedule", o.schedule, "Pipeline schedule: gpipe | 1f1b | 1f1b-deep | interleaved:V | zb-h1");
  train->add_option("--profile", o.profile, "Record a memory profile into DIR (see `ferry report DIR`)");
  train->add_option("--profile-steps", o.profile_steps, "Steps the profile covers: N (the first N, default 3) or A-B");
  train->add_option("--offload-optimizer", o.offload_optimizer,
                    "ZeRO-Offload: none | cpu (fp32 master weights and moments in pinned host memory) | nvme (on --nvme-path)");
  train->add_option("--nvme-path", o.nvme_path, "Directory on an NVMe drive for the optimizer state (--offload-optimizer nvme)");
  train->add_option("--offload-buffer-count", o.offload_buffer_count, "Host buffers for the NVMe tier, one sub-group each (default 4)");
  train->add_option("--offload-buffer-size", o.offload_buffer_size, "Host memory for those buffers together (default 256MiB)");
  train->add_option("--offload-sub-group", o.offload_sub_group, "Elements per optimizer sub-group (0: from the buffers, or 16M for cpu)");
  train->add_option("--reduce-bucket-size", o.reduce_bucket_size,
                    "Gradient buckets of at most this many elements (DeepSpeed's reduce_bucket_size): data parallelism reduces "
                    "them as their elements complete (default: the smaller of hidden^2 and a 128th of a rank's parameters); "
                    "offload streams them, larger weights in row slices (one rank's default 0: one whole parameter per bucket)");
  train->add_option("--weight-copy-elements", o.weight_copy_elements,
                    "bf16/fp16: convert a weight to f32 for the cpu matmuls in row slices of at most this many elements "
                    "(bounds that workspace; 0: whole weights)");
  train->add_option("--offload-pin-memory", o.offload_pin_memory, "Page-locked host buffers for offloaded state (default true)");
  train->add_option("--offload-queue-depth", o.offload_queue_depth, "NVMe I/Os in flight (default 32)");
  train->add_option("--offload-param", o.offload_param,
                    "ZeRO-Infinity, with --zero-stage 3 and --offload-optimizer: none | cpu (each rank's parameter partition in "
                    "pinned host memory) | nvme (in a file on --nvme-path); the device holds only the gathered layers");
  train->add_option("--offload-param-buffer-count", o.offload_param_buffer_count,
                    "Host buffers the NVMe parameter partition is read and written through (default 5)");
  train->add_option("--offload-param-buffer-size", o.offload_param_buffer_size,
                    "Bytes of each of those buffers (default 16MiB; pinned: count x size is all the host memory it holds)");
  return train;
}

CLI::App* add_eval_command(CLI::App& app, EvalOptions& o) {
  CLI::App* eval = app.add_subcommand("eval", "Mean loss of a model (safetensors) on data");
  eval->add_option("--init-from", o.init_from, "Hugging Face GPT-2 safetensors (config.json beside it is read)")->required();
  eval->add_option("--data", o.data, "llm.c token shard or plain text; default: the embedded corpus");
  eval->add_option("--batches", o.batches, "Micro-batches to average (0: the whole data)");
  eval->add_option("--batch", o.batch, "Micro-batch size");
  eval->add_option("--seq", o.seq, "Sequence length (default: the model's positions)");
  eval->add_option("--heads", o.heads, "Attention heads, when there is no config.json beside the weights");
  eval->add_option("--device", o.device, "cpu | meta");
  eval->add_option("--device-memory", o.device_memory, "Device memory limit");
  eval->add_option("--precision", o.precision, "fp32 | bf16");
  eval->add_option("--summary", o.summary, "Write the result as JSON here");
  eval->add_option("--threads", o.threads, "Compute threads (0: all cores)");
  return eval;
}

std::optional<std::string> find_train_flag(int argc, char** argv, std::string_view flag) {
  bool in_train = false;
  const std::string with_value = std::string(flag) + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument == "train") in_train = true;
    if (!in_train) continue;
    if (argument == flag && i + 1 < argc) return std::string(argv[i + 1]);
    if (argument.starts_with(with_value)) return std::string(argument.substr(with_value.size()));
  }
  return std::nullopt;
}

namespace {

json read_json_file(const std::string& path, const char* what) {
  try {
    return parse_bounded_json(read_text_file(path));
  } catch (const json::exception& error) {
    throw std::invalid_argument(std::string(what) + " '" + path + "' is not valid JSON: " + describe_json_error(error));
  }
}

}  // namespace

std::vector<std::string> apply_config_file(const std::string& path, TrainOptions& options) {
  return apply_config(read_json_file(path, "config"), path, options);
}

std::vector<std::string> apply_plan_file(const std::string& path, TrainOptions& options) {
  const json summary = read_json_file(path, "plan");
  if (!summary.is_object() || summary.value("command", json()) != "plan" || !summary.contains("plans") || !summary["plans"].is_array()) {
    throw std::invalid_argument("plan '" + path + "' is not a `ferry plan --summary` file (no \"command\": \"plan\" with \"plans\"): write one with "
                                "ferry plan ... --summary FILE");
  }
  for (const json& plan : summary["plans"]) {
    if (plan.is_object() && plan.value("fits", false) && plan.contains("deepspeed_config")) {
      return apply_config(plan["deepspeed_config"], path + "'s best plan", options);
    }
  }
  throw std::invalid_argument("plan '" + path + "' holds no plan that fits: plan again with more devices, more memory or a smaller global batch");
}

std::vector<std::string> apply_config(const json& config, const std::string& path, TrainOptions& options) {
  reject_unknown(config, "", {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
                              "gradient_clipping", "bf16", "fp16", "scheduler", "steps_per_print", "activation_checkpointing",
                              "recompute_granularity", "recompute_method", "recompute_num_layers", "zero_optimization", "aio", "ferry",
                              "tensor_model_parallel_size", "pipeline_model_parallel_size", "sequence_parallel"});
  if (config.contains("train_micro_batch_size_per_gpu")) {
    options.batch = value_of<std::int64_t>(config["train_micro_batch_size_per_gpu"], "train_micro_batch_size_per_gpu");
    options.batch_given = true;
  }
  if (config.contains("gradient_accumulation_steps")) {
    options.grad_accum = value_of<std::int64_t>(config["gradient_accumulation_steps"], "gradient_accumulation_steps");
    options.grad_accum_given = true;
  }
  // Checked against micro-batch x grad-accum x dp once the grid is known (make_training_plan).
  if (config.contains("train_batch_size")) options.train_batch_size = value_of<std::int64_t>(config["train_batch_size"], "train_batch_size");
  if (config.contains("tensor_model_parallel_size")) options.tp = value_of<std::int32_t>(config["tensor_model_parallel_size"], "tensor_model_parallel_size");
  if (config.contains("pipeline_model_parallel_size")) {
    options.pipeline_stages = value_of<std::int32_t>(config["pipeline_model_parallel_size"], "pipeline_model_parallel_size");
  }
  if (config.contains("sequence_parallel") && value_of<bool>(config["sequence_parallel"], "sequence_parallel")) {
    throw std::invalid_argument("config '" + path + "': sequence_parallel needs tensor parallelism, which is not built yet: set it to false");
  }
  if (config.contains("optimizer")) {
    const json& optimizer = config["optimizer"];
    reject_unknown(optimizer, "optimizer", {"type", "params"});
    const std::string type = value_of<std::string>(optimizer.value("type", json("AdamW")), "optimizer.type");
    const json params = optimizer.value("params", json::object());
    reject_unknown(params, "optimizer.params", {"lr", "betas", "eps", "weight_decay", "adam_w_mode"});
    // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (its FusedAdam and DeepSpeedCPUAdam default
    // to decoupled weight decay); Adam with L2 regularization in the gradient is not built.
    std::string lowered = type;
    std::transform(lowered.begin(), lowered.end(), lowered.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const bool adam_w_mode = value_of<bool>(params.value("adam_w_mode", json(true)), "optimizer.params.adam_w_mode");
    if (lowered != "adamw" && lowered != "adam") {
      throw std::invalid_argument("config key 'optimizer.type' is '" + type + "': ferry trains with AdamW (\"AdamW\", or DeepSpeed's \"Adam\" "
                                  "with adam_w_mode true, its default)");
    }
    if (lowered == "adamw" && params.contains("adam_w_mode") && !adam_w_mode) {
      throw std::invalid_argument("config: optimizer.type 'AdamW' with optimizer.params.adam_w_mode false contradict each other");
    }
    if (!adam_w_mode) {
      throw std::invalid_argument("config: optimizer 'Adam' with adam_w_mode false is Adam with L2 regularization (weight decay added to "
                                  "the gradient), which ferry does not build: set adam_w_mode true (AdamW, decoupled weight decay)");
    }
    if (params.contains("lr")) options.optimizer.lr = value_of<double>(params["lr"], "optimizer.params.lr");
    if (params.contains("eps")) options.optimizer.eps = value_of<double>(params["eps"], "optimizer.params.eps");
    if (params.contains("weight_decay")) {
      options.optimizer.weight_decay = value_of<double>(params["weight_decay"], "optimizer.params.weight_decay");
    }
    if (params.contains("betas")) {
      const auto betas = value_of<std::vector<double>>(params["betas"], "optimizer.params.betas");
      if (betas.size() != 2) throw std::invalid_argument("config key 'optimizer.params.betas' needs two numbers");
      std::ostringstream text;
      text.precision(17);
      text << betas[0] << "," << betas[1];
      options.optimizer.betas = text.str();
    }
  }
  if (config.contains("gradient_clipping")) options.optimizer.grad_clip = value_of<double>(config["gradient_clipping"], "gradient_clipping");
  if (config.contains("bf16")) {
    reject_unknown(config["bf16"], "bf16", {"enabled"});
    if (value_of<bool>(config["bf16"].value("enabled", json(false)), "bf16.enabled")) options.precision = "bf16";
  }
  if (config.contains("fp16")) apply_fp16(config["fp16"], path, options);
  if (config.contains("scheduler")) apply_scheduler(config["scheduler"], options);
  if (config.contains("steps_per_print")) options.log_every = value_of<std::int64_t>(config["steps_per_print"], "steps_per_print");
  if (config.contains("activation_checkpointing")) apply_activation_checkpointing(config["activation_checkpointing"], options);
  if (config.contains("recompute_granularity") || config.contains("recompute_method") || config.contains("recompute_num_layers")) {
    apply_megatron_recompute(config, options);
  }
  if (config.contains("zero_optimization")) apply_zero_optimization(config["zero_optimization"], options);
  if (config.contains("aio")) apply_aio(config["aio"], options);
  return config.contains("ferry") ? ferry_section_flags(config["ferry"]) : std::vector<std::string>{};
}

void check_config_flags(const std::vector<std::string>& flags, const std::string& path) {
  for (std::size_t i = 0; i + 1 < flags.size(); i += 2) {
    std::string key = flags[i].substr(2);
    std::replace(key.begin(), key.end(), '-', '_');
    CLI::App probe;
    TrainOptions scratch;
    CLI::App* train = add_train_command(probe, scratch);
    refuse_empty_values(*train);
    if (flags[i] == "--config" || train->get_option_no_throw(flags[i]) == nullptr) {
      std::vector<std::string> known;
      for (const CLI::Option* option : train->get_options()) {
        for (std::string name : option->get_lnames()) {
          std::replace(name.begin(), name.end(), '-', '_');
          if (name != "config") known.push_back(name);
        }
      }
      const std::optional<std::string> near = nearest_name(key, known);
      throw std::invalid_argument("config '" + path + "': unknown key 'ferry." + key + "'" + (near ? ": did you mean 'ferry." + *near + "'?" : "") +
                                  " (the section takes the flags of `ferry train --help`, with underscores)");
    }
    try {
      probe.parse(std::vector<std::string>{flags[i + 1], flags[i], "train"});  // CLI11 reads the vector from its end
    } catch (const CLI::ParseError& error) {
      throw std::invalid_argument("config '" + path + "': key 'ferry." + key + "' = " + flags[i + 1] + ": " + error.what());
    }
  }
}

}  // namespace ferry
