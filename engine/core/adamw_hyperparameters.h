// AdamW's hyperparameters, shared by the optimizer on the device (models/) and the offloaded one
// (offload/): both step with the same settings in the same operation order; and the buffers of one
// tensor's step, as the kernels of every device take them.
#pragma once

#include <cstdint>

namespace ferry {

struct AdamWHyperparameters {
  float learning_rate = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
};

// One tensor of an AdamW step, in the device's memory (parameter_bf16 may be null: no bf16 copy).
struct AdamWTensor {
  float* parameter = nullptr;
  std::uint16_t* parameter_bf16 = nullptr;
  const float* gradient = nullptr;
  float* first_moment = nullptr;
  float* second_moment = nullptr;
  std::int64_t count = 0;
};

}  // namespace ferry
