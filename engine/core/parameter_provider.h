// ParameterProvider: where a model's parameters come from when its rank does not hold them whole (ZeRO
// stage 3: each data-parallel rank keeps a partition, and a layer's parameters are gathered before it
// runs and given back after). The model names what a layer needs by its parameter indices and says when
// it is done; it never learns how the parameters arrive.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/core/tensor.h"

namespace ferry {

class ParameterProvider {
 public:
  virtual ~ParameterProvider() = default;
  // Parameters `indices` (the model's order, increasing) for the layer about to run: one tensor of each
  // parameter's shape and dtype, whose values stay current until release(indices).
  virtual std::vector<Tensor> acquire(std::span<const std::size_t> indices) = 0;
  // The layer after this one will acquire `indices`: a provider may start fetching them now (it holds
  // at most one such prefetch, so the working set stays a formula of the plan).
  virtual void prefetch(std::span<const std::size_t> indices) = 0;
  // The layer is done with `indices`. `again`: this micro-batch uses them again (a block's backward after
  // its forward), which a provider may keep them for.
  virtual void release(std::span<const std::size_t> indices, bool again) = 0;
};

}  // namespace ferry
