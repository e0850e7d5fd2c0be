#include "engine/train/training_setup.h"

#include <algorithm>
#include <stdexcept>

#include "allocator/allocator_config.h"
#include "allocator/allocator_errors.h"
#include "allocator/byte_size.h"
#include "engine/comm/communicator.h"
#include "engine/core/cpu_device.h"

namespace ferry {

DType parse_precision(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  throw std::invalid_argument("--precision '" + precision + "' is not one of fp32, bf16, fp16");
}

std::string precision_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    default: break;
  }
  throw std::invalid_argument("no training precision is " + std::string(dtype_name(dtype)));
}

std::size_t default_cpu_device_memory(int local_ranks) {
  return physical_memory_bytes() / 4 * 3 / static_cast<std::size_t>(std::max(local_ranks, 1));
}

std::unique_ptr<Device> make_training_device(const std::string& kind, const std::string& memory) {
  return make_training_device(parse_device_kind(kind), memory.empty() ? 0 : parse_byte_size(memory), AllocatorConfig::from_environment());
}

std::unique_ptr<Device> make_training_device(DeviceKind kind, std::size_t memory_limit, const AllocatorConfig& allocator,
                                             DeviceKind meta_target, int cuda_device) {
  DeviceOptions device_options;
  device_options.kind = kind;
  device_options.cuda_device = cuda_device;
  device_options.meta_target = meta_target;
  device_options.memory_limit = memory_limit;
  if (device_options.kind == DeviceKind::cpu && memory_limit == 0) {
    device_options.memory_limit = default_cpu_device_memory(detect_rank_environment().local_size);
  }
  device_options.allocator_config = allocator;
  try {
    return create_device(device_options);
  } catch (const SegmentSourceError& error) {
    if (device_options.kind == DeviceKind::cuda) throw;
    throw std::invalid_argument("--device-memory " + (memory_limit == 0 ? std::string("(default)") : format_bytes(memory_limit)) +
                                ": this machine cannot reserve the address space for a device that large (" + error.what() +
                                "); give a limit within its " + format_bytes(physical_memory_bytes()) + " of RAM");
  }
}

TokenDataset open_training_data(const std::string& path) {
  return path.empty() ? TokenDataset::embedded_corpus() : TokenDataset::open(path);
}

void check_vocabulary(const TokenDataset& data, const GptConfig& config) {
  if (data.vocab_needed() > config.vocab) {
    throw std::invalid_argument("'" + data.name() + "' holds token ids up to " + std::to_string(data.vocab_needed() - 1) +
                                " but the model's vocabulary is " + std::to_string(config.vocab) + "; use --vocab " +
                                std::to_string(data.vocab_needed()) + " or a matching model");
  }
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

nlohmann::json model_summary(const GptConfig& config) {
  return {{"name", config.name}, {"parameters", config.parameter_count()}, {"layers", config.layers}, {"hidden", config.hidden},
          {"heads", config.heads}, {"vocab", config.vocab}, {"max_sequence", config.max_sequence}};
}

std::vector<std::string> run_notes(const TrainOptions& o, int data_parallel_ranks) {
  std::vector<std::string> notes = o.notes;
  if (o.reduce_bucket_size && o.offload_optimizer == "none" && data_parallel_ranks == 1) {
    notes.push_back("reduce_bucket_size has no effect: without --offload-optimizer or data parallelism the gradients stay whole on the device");
  }
  if (o.allgather_bucket_size && data_parallel_ranks == 1) {
    notes.push_back("allgather_bucket_size has no effect on one data-parallel rank: no parameters are gathered");
  }
  if (o.weight_copy_elements > 0 && o.precision == "fp32") {
    notes.push_back("--weight-copy-elements has no effect: fp32 weights are used as they are, without f32 copies");
  }
  return notes;
}

offload::ZeroOffloadSettings offload_settings(const TrainOptions& o, offload::OffloadDevice device) {
  offload::ZeroOffloadSettings settings;
  settings.device = device;
  settings.nvme_path = o.nvme_path;
  settings.pin_memory = o.offload_pin_memory;
  settings.buffer_count = o.offload_buffer_count;
  settings.buffer_pool_bytes = parse_byte_size(o.offload_buffer_size);
  settings.sub_group_elements = o.offload_sub_group;
  settings.queue_depth = static_cast<unsigned>(o.offload_queue_depth);
  settings.chunk_bytes = static_cast<std::size_t>(o.offload_chunk_bytes);
  settings.adam.threads = o.threads;
  return settings;
}

}  // namespace ferry
