// Test helper: a GradientSink that adds every streamed piece (and every row an embedding hands over) into
// host copies of the whole gradients, in the order handed over, so tests compare streamed gradients
// with others bit for bit. `on_accumulate` lets a test record what arrives when.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "engine/core/gradient_sink.h"
#include "engine/core/tensor.h"
#include "models/gpt_parameters.h"

namespace ferry::testing {

class HostGradientSink : public GradientSink {
 public:
  explicit HostGradientSink(const std::vector<ParameterSpec>& parameters) {
    for (const ParameterSpec& each : parameters) gradients[each.index].assign(static_cast<std::size_t>(each.numel()), 0.0f);
  }
  void accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) override {
    std::vector<float> piece(static_cast<std::size_t>(gradient.numel()));
    gradient.copy_to_host(piece.data());
    for (std::size_t i = 0; i < piece.size(); ++i) gradients[index][static_cast<std::size_t>(offset) + i] += piece[i];
    if (on_accumulate) on_accumulate(index, gradient);
  }
  void accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) override {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(ids.numel()));
    ids.copy_to_host(tokens.data());
    std::vector<float> values(static_cast<std::size_t>(rows.numel()));
    rows.copy_to_host(values.data());
    const std::size_t width = values.size() / tokens.size();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      for (std::size_t c = 0; c < width; ++c) gradients[index][static_cast<std::size_t>(tokens[i]) * width + c] += values[i * width + c];
    }
  }

  std::map<std::size_t, std::vector<float>> gradients;
  std::function<void(std::size_t index, const Tensor& gradient)> on_accumulate;
};

}  // namespace ferry::testing
