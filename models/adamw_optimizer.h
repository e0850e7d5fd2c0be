// AdamW over a GPT model's parameters on the device that holds them: first and second moments (and
// f32 master weights when the parameters are bf16) in the optimizer_states category; weight decay on
// 2-D weights only; optional clipping by the global gradient norm, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "models/gpt_parameters.h"
#include "models/kernels/cpu/adamw.h"

namespace ferry {

struct OptimizerState {
  std::string name;     // the parameter's HF name
  Tensor first_moment;  // exp_avg
  Tensor second_moment; // exp_avg_sq
  Tensor master;        // f32 master weights (bf16 parameters only)
};

class AdamWOptimizer {
 public:
  AdamWOptimizer(const GptParameters& parameters, const GptParameters& gradients, cpu::AdamWHyperparameters hyperparameters);

  // The global L2 norm of all gradients (f64 accumulation).
  double gradient_norm() const;
  // One update at `learning_rate`; gradients are scaled by gradient_scale first. Returns the step count.
  std::int64_t step(float learning_rate, float gradient_scale);

  std::int64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }
  const std::vector<OptimizerState>& states() const { return states_; }
  // The f32 values the optimizer updates: master weights for bf16 parameters, else the parameters.
  std::vector<NamedTensor> master_weights() const;

 private:
  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> gradients_;
  std::vector<OptimizerState> states_;
  cpu::AdamWHyperparameters hyperparameters_;
  std::int64_t steps_ = 0;
};

// Gradient clipping as PyTorch: scale = max_norm / (norm + 1e-6) when that is below 1, else 1.
float clip_scale(double gradient_norm, double max_norm);

}  // namespace ferry
