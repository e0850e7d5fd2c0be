// The device's model-state bytes at the peak (parameters, gradients, optimizer states) beside the formula
// of the configuration run: without offload 16 bytes per parameter in fp32 (4+4+8) and 18 with 16-bit
// parameters (2 + 4 of f32 gradients + 12 of f32 master, m, v: Megatron's figure), and ZeRO-Offload's
// 16-bit parameters on the device with 12 of fp32 state and 4 of gradients on the host. Printed after
// training and kept in the summary.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "allocator/allocator_statistics.h"
#include "engine/core/dtype.h"

namespace ferry {

// `optimizer_offload`: where ZeRO-Offload keeps the optimizer state, "cpu" or "nvme" ("none": on the
// device). `zero_stage` and `dp`: data parallelism's partitions (stage 0, dp 1: none). `memory_bound`: a
// data-parallel rank's bound on its gradient and communication bytes, in its terms (the optimizer's
// description), kept beside the measured maxima (null: none).
nlohmann::json model_state_report(const AllocatorStatistics& device_statistics, std::int64_t parameters, DType parameter_dtype,
                                  const std::string& optimizer_offload, int zero_stage = 0, int dp = 1,
                                  const nlohmann::json& memory_bound = nullptr);
// Lines for the terminal, e.g. "  parameters  237.3 MiB on the device | ZeRO-Offload 2Ψ = 237.3 MiB".
std::string describe_model_state_report(const nlohmann::json& report);

// What ZeRO-Offload keeps on the host for a rank whose model part has `parameters` (ZeRO's formula):
// the f32 optimizer state (moments, and master weights for 16-bit parameters) and the f32 gradients of
// the parameters it updates, ceil(parameters / dp) from stage 1 on; with ZeRO-Infinity's parameter
// offload (stage 3) also that partition in the parameters' dtype. Pinned staging buffers come on top.
struct OffloadedHostBytes {
  std::int64_t optimizer_states = 0;
  std::int64_t gradients = 0;
  std::int64_t parameters = 0;
  std::int64_t total() const { return optimizer_states + gradients + parameters; }
};
OffloadedHostBytes offloaded_host_bytes(std::int64_t parameters, DType parameter_dtype, int zero_stage, int dp, bool parameters_offloaded = false);

// The model states ZeRO's formula puts on the device of a rank whose model part has `parameters`: the
// parameters in their dtype (a 1/dp partition at stage 3, none when offloaded), f32 gradients (1/dp from
// stage 2, none with the optimizer offloaded) and the optimizer's f32 state (1/dp from stage 1, none
// offloaded). All are resident at once when the optimizer steps, so no rank's peak is below them.
struct DeviceModelStates {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_states = 0;
  std::int64_t total() const { return parameters + gradients + optimizer_states; }
};
DeviceModelStates device_model_states(std::int64_t parameters, DType parameter_dtype, bool optimizer_offloaded, int zero_stage, int dp,
                                      bool parameters_offloaded = false);

// DeepSpeed's stage-3 estimator (estimate_zero3_model_states_mem_needs), model states only, in bytes per
// rank: 4 bytes per element of the largest layer (gathered), plus 18 bytes per parameter over the ranks
// (2 with the optimizer offloaded, none with the parameters offloaded too).
double deepspeed_zero3_estimate(double parameters, double largest_layer, double ranks, bool optimizer_offloaded, bool parameters_offloaded = false);

}  // namespace ferry
