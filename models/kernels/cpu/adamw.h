// Optimizer kernels on the host: the AdamW update exactly as torch.optim.AdamW computes it (decoupled
// weight decay, bias-corrected moments), with an optional bf16 copy of the updated parameters, and a
// deterministic sum of squares for the global gradient norm.
#pragma once

#include <cstdint>

#include "engine/core/adamw_hyperparameters.h"

namespace ferry::cpu {

using AdamWHyperparameters = ferry::AdamWHyperparameters;

// One step (step counts from 1) over `count` parameters. gradient is multiplied by gradient_scale
// first (clipping, loss-scale undo). parameter_bf16 may be null; otherwise it receives the rounded
// updated parameters.
void adamw_update(float* parameter, std::uint16_t* parameter_bf16, const float* gradient, float* first_moment,
                  float* second_moment, std::int64_t count, const AdamWHyperparameters& hyperparameters,
                  std::int64_t step, float gradient_scale);

// Sum of squares in double over fixed blocks summed in order: the same result on any thread count.
double sum_of_squares(const float* values, std::int64_t count);

}  // namespace ferry::cpu
