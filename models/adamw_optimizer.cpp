#include "models/adamw_optimizer.h"

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/core/op_recorder.h"
#include "models/kernel_backend.h"
#include "models/tensor_ops.h"

namespace ferry {

AdamWOptimizer::AdamWOptimizer(const GptParameters& parameters, const GptParameters& gradients,
                               cpu::AdamWHyperparameters hyperparameters)
    : parameters_(parameters.named()), gradients_(gradients.named()), hyperparameters_(hyperparameters) {
  for (const NamedTensor& each : parameters_) {
    const Tensor& parameter = *each.tensor;
    Device& device = parameter.device();
    OptimizerState state;
    state.name = each.name;
    state.first_moment = Tensor::zeros(device, parameter.shape(), DType::f32, MemoryCategory::optimizer_states, "exp_avg." + each.name);
    state.second_moment = Tensor::zeros(device, parameter.shape(), DType::f32, MemoryCategory::optimizer_states, "exp_avg_sq." + each.name);
    if (parameter.dtype() != DType::f32) {
      state.master = Tensor::empty(device, parameter.shape(), DType::f32, MemoryCategory::optimizer_states, "master." + each.name);
      if (device.has_storage()) {
        ops::kernel_backend(device).convert_to_f32(parameter.data(), parameter.dtype(), state.master.data_as<float>(), parameter.numel());
      }
    }
    states_.push_back(std::move(state));
  }
}

double AdamWOptimizer::gradient_sum_of_squares(std::optional<std::size_t> excluded) const {
  if (gradients_.empty()) return 0.0;
  Device& device = gradients_.front().tensor->device();
  std::vector<const Tensor*> tensors;
  for (const NamedTensor& each : gradients_) {
    if (!excluded || each.index != *excluded) tensors.push_back(each.tensor);
  }
  // A dry run takes the kernels' scratch as a run does (0 is its sum), and times nothing.
  std::optional<OpScope> op;
  if (device.has_storage()) op.emplace(device, "optimizer", "gradient_norm");
  return ops::sum_of_squares(device, tensors);
}

const Tensor& AdamWOptimizer::gradient_of(std::size_t index) const {
  for (const NamedTensor& each : gradients_) {
    if (each.index == index) return *each.tensor;
  }
  throw std::out_of_range("the optimizer holds no gradient of parameter " + std::to_string(index));
}

std::int64_t AdamWOptimizer::step(float learning_rate, float gradient_scale) {
  ++steps_;
  if (parameters_.empty()) return steps_;
  Device& device = parameters_.front().tensor->device();
  if (!device.has_storage()) return steps_;
  const OpScope op(device, "optimizer", "adamw");
  // Two lists, one per weight decay (only 2-D tensors decay: not biases or LayerNorms), each one fused step.
  std::vector<AdamWTensor> decayed, undecayed;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& parameter = *parameters_[i].tensor;
    const OptimizerState& state = states_[i];
    const bool has_master = state.master.defined();
    // bf16 copies come out of the fused step; other dtypes are rounded from the master weights after it.
    (decays(parameter) ? decayed : undecayed)
        .push_back({has_master ? state.master.data_as<float>() : parameter.data_as<float>(),
                    parameter.dtype() == DType::bf16 ? parameter.data_as<std::uint16_t>() : nullptr,
                    gradients_[i].tensor->data_as<float>(), state.first_moment.data_as<float>(), state.second_moment.data_as<float>(),
                    parameter.numel()});
  }
  adamw_update_lists(device, decayed, undecayed, hyperparameters_, learning_rate, steps_, gradient_scale);
  ops::KernelBackend& kernels = ops::kernel_backend(device);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& parameter = *parameters_[i].tensor;
    if (parameter.dtype() != DType::f32 && parameter.dtype() != DType::bf16) {
      kernels.convert_from_f32(states_[i].master.data_as<float>(), parameter.data(), parameter.dtype(), parameter.numel());
    }
  }
  return steps_;
}

std::vector<NamedTensor> AdamWOptimizer::master_weights() const {
  std::vector<NamedTensor> result;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    result.push_back({parameters_[i].name, states_[i].master.defined() ? &states_[i].master : parameters_[i].tensor});
  }
  return result;
}

void adamw_update_lists(Device& device, std::span<const AdamWTensor> decayed, std::span<const AdamWTensor> undecayed,
                        AdamWHyperparameters hyperparameters, float learning_rate, std::int64_t step, float gradient_scale) {
  hyperparameters.learning_rate = learning_rate;
  ops::KernelBackend& kernels = ops::kernel_backend(device);
  kernels.adamw_update(decayed, hyperparameters, step, gradient_scale);
  hyperparameters.weight_decay = 0.0f;
  kernels.adamw_update(undecayed, hyperparameters, step, gradient_scale);
}

float clip_scale(double gradient_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double scale = max_norm / (gradient_norm + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

}  // namespace ferry
