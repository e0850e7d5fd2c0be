// The pieces every training job sets up the same way (one process, or one rank of a pipeline): the
// precision, the device, the data and its vocabulary check, the summary's model section and the
// offload settings.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/data/token_data.h"
#include "engine/train/train_options.h"
#include "models/gpt_config.h"
#include "offload/zero_offload_optimizer.h"

namespace ferry {

DType parse_precision(const std::string& precision);
// The --precision name of a dtype parse_precision gives ("fp32", "bf16", "fp16").
std::string precision_name(DType dtype);
// The cpu device's memory is this machine's RAM: by default three quarters of it, shared by the ranks
// on this machine, so ferry's out-of-memory advice acts before the kernel's OOM killer does. From the
// physical size, not what is free now, so every rank derives the same limit (and the same choices).
std::size_t default_cpu_device_memory(int local_ranks);
// --device and --device-memory (cuda: create_device says when this build or machine has no GPU).
std::unique_ptr<Device> make_training_device(const std::string& kind, const std::string& memory);
// The same, typed: memory_limit 0 is the device's default; `allocator` its caching allocator's settings.
// `meta_target`: on meta, the kind whose allocations the dry run makes (TrainingPlan::kernels).
// `cuda_device`: on cuda, the GPU's ordinal (a grid's, ProcessGrid::gpu()).
std::unique_ptr<Device> make_training_device(DeviceKind kind, std::size_t memory_limit, const AllocatorConfig& allocator,
                                             DeviceKind meta_target = DeviceKind::cpu, int cuda_device = 0);
TokenDataset open_training_data(const std::string& path);  // empty: the embedded corpus
void check_vocabulary(const TokenDataset& data, const GptConfig& config);
double median(std::vector<double> values);
nlohmann::json model_summary(const GptConfig& config);
// What the run says once at its start: the config keys accepted without effect, and the settings this
// configuration leaves without effect (a bucket bound without offload, f32 copies of f32 weights).
std::vector<std::string> run_notes(const TrainOptions& options, int data_parallel_ranks);
// ZeRO-Offload's settings from --offload-optimizer, --nvme-path, --offload-* and --threads.
offload::ZeroOffloadSettings offload_settings(const TrainOptions& options, offload::OffloadDevice device);

}  // namespace ferry
