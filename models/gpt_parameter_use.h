// GptModel::ParameterUse, a layer's hold on its parameters, for the model's source files: where the
// model does not hold them (ParameterResidence::provided) it acquires them from its provider for the
// layer's duration and releases them after.
#pragma once

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <vector>

#include "models/gpt_model.h"

namespace ferry {

// A layer's hold on parameters `indices`: those the model does not hold are acquired from the provider
// and set into parameters_ until the scope ends (then released); those it holds (whole residence, or an
// enclosing scope's: a recompute inside a backward) are left alone. A scope that acquired anything asks
// the provider to prefetch `next`, the parameters the next layer in its direction will acquire.
class GptModel::ParameterUse {
 public:
  inline ParameterUse(GptModel& model, const std::vector<std::size_t>& indices, bool again, const std::vector<std::size_t>& next = {})
      : model_(model), again_(again) {
    if (model.residence_ == ParameterResidence::whole) return;
    for (std::size_t index : indices) {
      if (!model.parameters_.tensor_at(index).defined()) acquired_.push_back(index);
    }
    if (acquired_.empty()) return;
    if (model.provider_ == nullptr) throw std::logic_error("a model with provided parameters ran a layer before it was given a provider");
    std::vector<Tensor> tensors = model.provider_->acquire(acquired_);
    if (tensors.size() != acquired_.size()) throw std::logic_error("a parameter provider returned another number of tensors than asked");
    for (std::size_t i = 0; i < acquired_.size(); ++i) model.parameters_.tensor_at(acquired_[i]) = std::move(tensors[i]);
    if (!next.empty()) model.provider_->prefetch(next);
  }
  inline ~ParameterUse() {
    if (acquired_.empty()) return;
    for (std::size_t index : acquired_) model_.parameters_.tensor_at(index) = Tensor();
    try {
      model_.provider_->release(acquired_, again_);
    } catch (const std::exception& error) {  // destructors never throw: said, and the provider keeps them
      std::fprintf(stderr, "ferry: releasing parameters failed: %s\n", error.what());
    }
  }
  ParameterUse(const ParameterUse&) = delete;
  ParameterUse& operator=(const ParameterUse&) = delete;

 private:
  GptModel& model_;
  bool again_;
  std::vector<std::size_t> acquired_;
};

}  // namespace ferry
