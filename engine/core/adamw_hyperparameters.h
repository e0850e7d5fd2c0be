// AdamW's hyperparameters, shared by the optimizer on the device (models/) and the offloaded one
// (offload/): both step with the same settings in the same operation order.
#pragma once

namespace ferry {

struct AdamWHyperparameters {
  float learning_rate = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
};

}  // namespace ferry
