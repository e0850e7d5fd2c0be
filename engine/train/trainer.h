// `ferry train` and `ferry eval`: wire the device, data, model, optimizer, checkpoints and progress
// together (the parts live below; nothing here reimplements them) and produce the summary JSON of
// ARCHITECTURE.md's contract.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/train/train_options.h"

namespace ferry {

nlohmann::json run_training(const TrainOptions& options);
nlohmann::json run_evaluation(const EvalOptions& options);

// memory {peak_allocated, peak_reserved, at_peak, max_by_category, ...} of a device's allocator.
// `optimizer` is the optimizer's describe() (host pinned peak, NVMe bytes), or empty.
nlohmann::json memory_summary(const Device& device, const nlohmann::json& optimizer);

}  // namespace ferry
