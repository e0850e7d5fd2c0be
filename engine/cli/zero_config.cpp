#include "engine/cli/zero_config.h"

#include "engine/cli/config_keys.h"

namespace ferry {

using config::reject_unknown;
using config::value_of;
using nlohmann::json;

namespace {

void apply_offload_optimizer(const json& section, TrainOptions& options) {
  reject_unknown(section, "zero_optimization.offload_optimizer",
                 {"device", "nvme_path", "pin_memory", "buffer_count", "pipeline_read", "pipeline_write", "fast_init", "ratio"});
  const std::string where = "zero_optimization.offload_optimizer.";
  if (section.contains("device")) options.offload_optimizer = value_of<std::string>(section["device"], where + "device");
  if (section.contains("nvme_path")) options.nvme_path = value_of<std::string>(section["nvme_path"], where + "nvme_path");
  if (section.contains("pin_memory")) options.offload_pin_memory = value_of<bool>(section["pin_memory"], where + "pin_memory");
  if (section.contains("buffer_count")) options.offload_buffer_count = value_of<int>(section["buffer_count"], where + "buffer_count");
  if (section.contains("ratio") && value_of<double>(section["ratio"], where + "ratio") != 1.0) {
    throw std::invalid_argument(where + "ratio (part of the update on the GPU, Twin-Flow) is not supported: remove it or set it to 1");
  }
  for (const char* key : {"pipeline_read", "pipeline_write", "fast_init"}) {
    if (section.contains(key)) {
      options.notes.push_back(where + key + " has no effect: ferry always pipelines reads and writes of the NVMe tier");
    }
  }
}

void apply_offload_param(const json& section, TrainOptions& options) {
  reject_unknown(section, "zero_optimization.offload_param", {"device", "nvme_path", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu"});
  const std::string where = "zero_optimization.offload_param.";
  if (section.contains("device")) options.offload_param = value_of<std::string>(section["device"], where + "device");
  if (section.contains("nvme_path")) {
    const auto path = value_of<std::string>(section["nvme_path"], where + "nvme_path");
    if (!options.nvme_path.empty() && options.nvme_path != path) {
      throw std::invalid_argument(where + "nvme_path '" + path + "' differs from offload_optimizer.nvme_path '" + options.nvme_path +
                                  "': ferry keeps a rank's parameters and optimizer state in one directory; give the same path");
    }
    options.nvme_path = path;
  }
  if (section.contains("pin_memory")) options.offload_pin_memory = value_of<bool>(section["pin_memory"], where + "pin_memory");
  if (section.contains("buffer_count")) options.offload_param_buffer_count = value_of<int>(section["buffer_count"], where + "buffer_count");
  if (section.contains("buffer_size")) options.offload_param_buffer_elements = value_of<std::int64_t>(section["buffer_size"], where + "buffer_size");
  if (section.contains("max_in_cpu")) {
    options.notes.push_back(where + "max_in_cpu has no effect: with nvme, ferry keeps no parameters in host memory beyond its buffers");
  }
}

}  // namespace

void apply_zero_optimization(const json& section, TrainOptions& options) {
  reject_unknown(section, "zero_optimization",
                 {"stage", "offload_optimizer", "offload_param", "sub_group_size", "contiguous_gradients", "overlap_comm",
                  "reduce_bucket_size", "allgather_bucket_size", "reduce_scatter", "allgather_partitions", "stage3_prefetch_bucket_size",
                  "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                  "stage3_gather_16bit_weights_on_model_save"});
  if (section.contains("stage")) {
    const auto stage = value_of<int>(section["stage"], "zero_optimization.stage");
    if (stage < 0 || stage > 3) throw std::invalid_argument("zero_optimization.stage must be 0, 1, 2 or 3, got " + std::to_string(stage));
    options.zero_stage = stage;
  }
  if (section.contains("offload_optimizer")) apply_offload_optimizer(section["offload_optimizer"], options);
  if (section.contains("offload_param")) apply_offload_param(section["offload_param"], options);
  if (section.contains("sub_group_size")) {
    options.offload_sub_group = value_of<std::int64_t>(section["sub_group_size"], "zero_optimization.sub_group_size");
  }
  if (section.contains("reduce_bucket_size")) {
    options.reduce_bucket_size = value_of<std::int64_t>(section["reduce_bucket_size"], "zero_optimization.reduce_bucket_size");
  }
  if (section.contains("allgather_bucket_size")) {
    options.allgather_bucket_size = value_of<std::int64_t>(section["allgather_bucket_size"], "zero_optimization.allgather_bucket_size");
  }
  if (section.contains("overlap_comm")) options.overlap_comm = value_of<bool>(section["overlap_comm"], "zero_optimization.overlap_comm");
  // What these switch in DeepSpeed, ferry always does: gradients in one flat buffer (or partition),
  // reduce-scatter from stage 1, parameters gathered by partition.
  for (const char* key : {"contiguous_gradients", "reduce_scatter", "allgather_partitions"}) {
    if (section.contains(key) && !value_of<bool>(section[key], std::string("zero_optimization.") + key)) {
      options.notes.push_back(std::string("zero_optimization.") + key +
                              " = false has no effect: ferry's data parallelism always keeps flat gradients, reduce-scatters from "
                              "stage 1 and gathers parameters by partition");
    }
  }
  // Stage 3's gather keys: "auto" (Hugging Face's) is ferry's default for each.
  for (const auto& [key, field] : {std::pair{"stage3_prefetch_bucket_size", &TrainOptions::stage3_prefetch_bucket_size},
                                   std::pair{"stage3_max_live_parameters", &TrainOptions::stage3_max_live_parameters}}) {
    if (!section.contains(key) || (section[key].is_string() && section[key].get<std::string>() == "auto")) continue;
    options.*field = value_of<std::int64_t>(section[key], std::string("zero_optimization.") + key);
  }
  // The other tuning keys: ferry's gathers are fixed by the plan, so each is said to have no effect, with
  // what ferry does instead.
  const std::pair<const char*, const char*> stage3_keys[] = {
      {"stage3_param_persistence_threshold", "ferry gathers a layer's parameters in one collective, its small tensors with it"},
      {"stage3_max_reuse_distance", "ferry frees a block's gathered parameters after its forward (--reshard-after-forward true) or "
                                    "keeps them to its backward (false), within stage3_max_live_parameters"},
      {"stage3_gather_16bit_weights_on_model_save", "ferry's checkpoints are always consolidated, each rank writing its partition"}};
  for (const auto& [key, instead] : stage3_keys) {
    if (section.contains(key)) options.notes.push_back(std::string("zero_optimization.") + key + " has no effect: " + instead);
  }
}

void apply_aio(const json& section, TrainOptions& options) {
  reject_unknown(section, "aio", {"block_size", "queue_depth", "thread_count", "single_submit", "overlap_events", "use_gds"});
  if (section.contains("block_size")) options.offload_chunk_bytes = value_of<std::int64_t>(section["block_size"], "aio.block_size");
  if (section.contains("queue_depth")) options.offload_queue_depth = value_of<int>(section["queue_depth"], "aio.queue_depth");
  if (section.contains("use_gds") && value_of<bool>(section["use_gds"], "aio.use_gds")) {
    throw std::invalid_argument("aio.use_gds (GPUDirect Storage) is not supported: set it to false");
  }
  for (const char* key : {"thread_count", "single_submit", "overlap_events"}) {
    if (section.contains(key)) options.notes.push_back(std::string("aio.") + key + " has no effect: ferry submits batches on one io_uring ring");
  }
}

}  // namespace ferry
