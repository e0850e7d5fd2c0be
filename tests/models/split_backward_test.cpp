// Zero Bubble's split backward: a block's input-gradient pass (I) then its weight-gradient pass (W) give
// bitwise the gradients of the whole backward, with and without dropout (whose branch gradients are not
// aliased to the residual gradient) and under every recompute level, and with gradients streamed to a
// sink; what I keeps for W is activations of a known size; W without I is refused; a model part holds
// only its blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "models/gpt_model.h"
#include "tests/models/random_tokens.h"

namespace ferry {
namespace {

constexpr std::int64_t B = 2, T = 5;

GptConfig config() { return GptConfig{"split-test", 2, 16, 2, 13, 8}; }

struct Gradients {
  std::vector<float> input;
  std::vector<float> parameters;  // block 1's, in fields() order
};

// Adds what a streamed backward hands over into host copies keyed by the parameter index.
class RecordingSink final : public GradientSink {
 public:
  void accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) override {
    const std::vector<float> values = copy_to_host_f32(gradient);
    std::vector<float>& sum = sums[index];
    sum.resize(std::max(sum.size(), static_cast<std::size_t>(offset) + values.size()));
    for (std::size_t i = 0; i < values.size(); ++i) sum[static_cast<std::size_t>(offset) + i] += values[i];
    ++calls[index];
  }
  void accumulate_rows(std::size_t, const Tensor&, const Tensor&) override { ADD_FAILURE() << "a block hands over no rows"; }
  std::map<std::size_t, std::vector<float>> sums;
  std::map<std::size_t, int> calls;
};

Gradients block_gradients(GptDropout dropout, ActivationKeep keep, bool split, GradientStorage storage = GradientStorage::whole) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, config(), DType::f32, dropout, storage);
  RecordingSink sink;
  if (storage == GradientStorage::streamed) model.set_gradient_sink(&sink);
  initialize_gpt_parameters(model.parameters(), config(), 5);
  model.zero_gradients();
  const cpu::RandomKey key{17};
  const Tensor x = model.embedding_forward(testing::random_tokens(*device, 3, B, T, 13), key);
  BlockActivations activations = model.block_forward(1, x, key, keep);
  Tensor gradient = Tensor::empty(*device, {B, T, 16}, DType::f32, MemoryCategory::workspace);
  std::vector<float> ones(static_cast<std::size_t>(B * T * 16));
  for (std::size_t i = 0; i < ones.size(); ++i) ones[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
  copy_from_host_f32(gradient, ones.data());
  Tensor input_gradient;
  if (split) {
    BlockWeightGradientInputs deferred;
    input_gradient = model.block_backward_input(1, std::move(activations), gradient, key, deferred);
    EXPECT_TRUE(deferred.defined());
    model.block_backward_weight(1, std::move(deferred));
  } else {
    input_gradient = model.block_backward(1, std::move(activations), gradient, key);
  }
  Gradients result{copy_to_host_f32(input_gradient), {}};
  for (std::size_t i = 0; i < GptBlockParameters::kCount; ++i) {
    const std::size_t index = GptParameters::block_index(1) + i;
    if (storage == GradientStorage::streamed) {
      EXPECT_EQ(sink.calls[index], 1) << "parameter " << index << " handed over once";
    }
    const std::vector<float> values =
        storage == GradientStorage::streamed ? sink.sums[index] : copy_to_host_f32(*model.gradients().blocks[1].fields()[i].second);
    result.parameters.insert(result.parameters.end(), values.begin(), values.end());
  }
  if (storage == GradientStorage::streamed) {
    EXPECT_EQ(sink.sums.size(), GptBlockParameters::kCount) << "only block 1's gradients";
  }
  return result;
}

TEST(SplitBackward, InputThenWeightPassGivesBitwiseTheWholeBackward) {
  for (const GptDropout dropout : {GptDropout{}, GptDropout{0.0f, 0.2f, 0.3f}}) {
    for (const ActivationKeep keep : {ActivationKeep::all, ActivationKeep::selective, ActivationKeep::input_only}) {
      const Gradients whole = block_gradients(dropout, keep, false);
      const Gradients split = block_gradients(dropout, keep, true);
      EXPECT_EQ(split.input, whole.input) << "residual dropout " << dropout.residual << ", keep " << static_cast<int>(keep);
      EXPECT_EQ(split.parameters, whole.parameters) << "residual dropout " << dropout.residual << ", keep " << static_cast<int>(keep);
      bool nonzero = false;
      for (float value : whole.parameters) nonzero = nonzero || value != 0.0f;
      EXPECT_TRUE(nonzero);
    }
  }
}

TEST(SplitBackward, StreamedGradientsReachTheSinkOnceEachAndEqualTheWholeBackward) {
  // The input pass hands over the LayerNorms' gradients, the weight pass the projections'.
  for (const GptDropout dropout : {GptDropout{}, GptDropout{0.0f, 0.2f, 0.3f}}) {
    const Gradients whole = block_gradients(dropout, ActivationKeep::selective, false);
    const Gradients streamed_split = block_gradients(dropout, ActivationKeep::selective, true, GradientStorage::streamed);
    const Gradients streamed_whole = block_gradients(dropout, ActivationKeep::selective, false, GradientStorage::streamed);
    EXPECT_EQ(streamed_split.input, whole.input);
    EXPECT_EQ(streamed_split.parameters, whole.parameters);
    EXPECT_EQ(streamed_whole.parameters, whole.parameters);
  }
}

// What I leaves for W is counted as activations, all of it (with dropout too, whose branch gradients
// are kept in place rather than copied), whatever the block kept in forward: 7 BTC e bytes of projection
// inputs and 9 BTC e of output gradients (in the compute dtype, as the residual gradient it gets); no
// workspace outlives I.
TEST(SplitBackward, WhatTheWeightPassKeepsIsActivationsOfKnownSize) {
  constexpr std::int64_t C = 16;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const GptDropout dropout : {GptDropout{}, GptDropout{0.0f, 0.2f, 0.3f}}) {
      for (const ActivationKeep keep : {ActivationKeep::all, ActivationKeep::selective, ActivationKeep::input_only}) {
        auto device = create_device(DeviceOptions{});
        GptModel model(*device, config(), dtype, dropout);
        initialize_gpt_parameters(model.parameters(), config(), 5);
        const cpu::RandomKey key{17};
        auto current = [&](MemoryCategory category) {
          return device->allocator().statistics().category_requested_bytes[static_cast<std::size_t>(category)].current;
        };
        const Tensor x = model.embedding_forward(testing::random_tokens(*device, 3, B, T, 13), key);
        const std::int64_t activations_before = current(MemoryCategory::activations);
        BlockActivations activations = model.block_forward(1, x, key, keep);
        const Tensor gradient = Tensor::zeros(*device, {B, T, C}, dtype, MemoryCategory::activation_gradients);
        const std::int64_t workspace_before = current(MemoryCategory::workspace);
        BlockWeightGradientInputs deferred;
        const Tensor input_gradient = model.block_backward_input(1, std::move(activations), gradient, key, deferred);
        const std::int64_t e = static_cast<std::int64_t>(dtype_size(dtype));
        const std::string label = std::string(dtype_name(dtype)) + ", residual dropout " + std::to_string(dropout.residual) + ", keep " +
                                  std::to_string(static_cast<int>(keep));
        EXPECT_EQ(current(MemoryCategory::activations) - activations_before, 7 * B * T * C * e + 9 * B * T * C * e) << label;
        EXPECT_EQ(current(MemoryCategory::workspace), workspace_before) << label;
        model.block_backward_weight(1, std::move(deferred));
        EXPECT_EQ(current(MemoryCategory::activations), activations_before) << label;
      }
    }
  }
}

TEST(SplitBackward, WeightPassWithoutInputPassIsRefused) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, config(), DType::f32);
  EXPECT_THROW(model.block_backward_weight(0, BlockWeightGradientInputs{}), std::logic_error);
}

TEST(ModelPart, HoldsOnlyItsBlocksAndEnds) {
  auto device = create_device(DeviceOptions{});
  GptModel whole(*device, config(), DType::f32);
  GptModel middle(*device, config(), DType::f32, {}, GradientStorage::whole, GptModelPart::layers(1, 2, 2, false, false));
  GptModel last(*device, config(), DType::f32, {}, GradientStorage::whole, GptModelPart::layers(1, 2, 2, false, true));
  const std::vector<NamedTensor> middle_tensors = middle.parameters().named();
  ASSERT_EQ(middle_tensors.size(), GptBlockParameters::kCount);
  EXPECT_EQ(middle_tensors.front().name, "h.1.ln_1.weight");
  EXPECT_EQ(middle_tensors.front().index, GptParameters::block_index(1));
  const std::vector<NamedTensor> last_tensors = last.parameters().named();
  ASSERT_EQ(last_tensors.size(), GptBlockParameters::kCount + 3);  // + wte (tied head), ln_f weight and bias
  EXPECT_EQ(last_tensors.front().name, "wte.weight");
  // Initialization is keyed by the position in the whole model: a part's tensors equal the whole's.
  initialize_gpt_parameters(whole.parameters(), config(), 9);
  initialize_gpt_parameters(last.parameters(), config(), 9);
  EXPECT_EQ(copy_to_host_f32(last.parameters().blocks[1].mlp_c_fc_weight), copy_to_host_f32(whole.parameters().blocks[1].mlp_c_fc_weight));
  EXPECT_EQ(copy_to_host_f32(last.parameters().wte), copy_to_host_f32(whole.parameters().wte));
  const Tensor x = Tensor::zeros(*device, {B, T, 16}, DType::f32, MemoryCategory::activations);
  EXPECT_THROW(middle.block_forward(0, x, cpu::RandomKey{1}), std::out_of_range);
  EXPECT_THROW(middle.embedding_forward(testing::random_tokens(*device, 1, B, T, 13), cpu::RandomKey{1}), std::logic_error);
}

}  // namespace
}  // namespace ferry
