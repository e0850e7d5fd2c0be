// AdamW over a GPT model's parameters on the device that holds them: first and second moments (and
// f32 master weights when the parameters are bf16) in the optimizer_states category; weight decay on
// 2-D weights only; optional clipping by the global gradient norm, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
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

  // The sum of squares of the gradients (f64 accumulation), leaving out the model's parameter
  // `excluded` (NamedTensor::index) when given; 0 on a device without storage.
  double gradient_sum_of_squares(std::optional<std::size_t> excluded = std::nullopt) const;
  // The global L2 norm of all gradients.
  double gradient_norm() const { return std::sqrt(gradient_sum_of_squares()); }
  // The gradient of the model's parameter `index` (NamedTensor::index); throws std::out_of_range when
  // this optimizer does not hold it.
  const Tensor& gradient_of(std::size_t index) const;
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

// One fused AdamW step on `device` of two tensor lists: `decayed` with the hyperparameters' weight decay,
// `undecayed` (biases, LayerNorms) without; the learning rate is `learning_rate`.
void adamw_update_lists(Device& device, std::span<const AdamWTensor> decayed, std::span<const AdamWTensor> undecayed,
                        AdamWHyperparameters hyperparameters, float learning_rate, std::int64_t step, float gradient_scale);

// Gradient clipping as PyTorch: scale = max_norm / (norm + 1e-6) when that is below 1, else 1.
float clip_scale(double gradient_norm, double max_norm);

}  // namespace ferry
