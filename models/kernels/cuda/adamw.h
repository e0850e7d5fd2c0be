// Optimizer kernels on the GPU, twins of models/kernels/cpu/adamw.h: a fused multi-tensor AdamW (one
// launch updates a list of tensors, with torch.optim.AdamW's arithmetic and an optional bf16 copy of
// each updated parameter), and a deterministic sum of squares for the global gradient norm.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "engine/core/adamw_hyperparameters.h"

namespace ferry::cuda {

// One step (step counts from 1) of every tensor; gradients are multiplied by gradient_scale first.
// Launches once per kAdamWTensorsPerLaunch tensors.
inline constexpr std::size_t kAdamWTensorsPerLaunch = 48;
void adamw_update(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hyperparameters, std::int64_t step,
                  float gradient_scale, cudaStream_t stream);

// The scratch sum_of_squares needs for `count` values, in doubles.
std::int64_t sum_of_squares_scratch_elements(std::int64_t count);
// *result (device, f64) = sum of values[i]^2 (or += with accumulate): fixed blocks of f64 partial
// sums, added in order, so the result repeats bit for bit. scratch: sum_of_squares_scratch_elements.
void sum_of_squares(double* result, bool accumulate, const float* values, std::int64_t count, double* scratch, cudaStream_t stream);

}  // namespace ferry::cuda
