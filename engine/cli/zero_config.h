// DeepSpeed's zero_optimization section (stage, offload_optimizer {device, nvme_path, pin_memory,
// buffer_count, ...}, sub_group_size) and its aio section (block_size, queue_depth), mapped onto
// ferry's --offload-* settings. Keys ferry cannot honour are refused with the reason.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/train/train_options.h"

namespace ferry {

void apply_zero_optimization(const nlohmann::json& section, TrainOptions& options);
void apply_aio(const nlohmann::json& section, TrainOptions& options);

}  // namespace ferry
