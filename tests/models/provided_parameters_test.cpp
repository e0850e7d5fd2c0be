// A model whose parameters are provided layer by layer (ParameterResidence::provided, ZeRO stage 3's
// seam) trains bitwise as one that holds them whole, with every recompute policy, both tied-table modes,
// f32 and bf16, and evaluates alike; it holds no parameter between layers, asks for each block once in
// forward and once in backward (a recompute inside the backward asks nothing more), prefetches the next
// layer in its direction, and releases everything it acquired.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/gradient_sink.h"
#include "engine/core/parameter_provider.h"
#include "models/gpt_model.h"
#include "tests/models/host_gradient_sink.h"
#include "tests/models/random_tokens.h"

namespace ferry {
namespace {

// Hands out fresh copies of a whole model's tensors and records what was asked, when.
class CopyingProvider final : public ParameterProvider {
 public:
  explicit CopyingProvider(const GptParameters& source) {
    for (const NamedTensor& each : source.named()) source_[each.index] = each.tensor;
  }
  std::vector<Tensor> acquire(std::span<const std::size_t> indices) override {
    std::vector<Tensor> result;
    for (std::size_t index : indices) {
      const Tensor& source = *source_.at(index);
      result.push_back(Tensor::empty(source.device(), source.shape(), source.dtype(), MemoryCategory::parameters, "provided"));
      result.back().copy_from(source);
      ++held_[index];
      if (held_[index] > 1) throw std::logic_error("parameter " + std::to_string(index) + " acquired twice at once");
    }
    events.push_back("acquire " + std::to_string(indices.front()));
    return result;
  }
  void prefetch(std::span<const std::size_t> indices) override { events.push_back("prefetch " + std::to_string(indices.front())); }
  void release(std::span<const std::size_t> indices, bool again) override {
    for (std::size_t index : indices) {
      if (held_[index] != 1) throw std::logic_error("parameter " + std::to_string(index) + " released without being held");
      --held_[index];
    }
    events.push_back("release " + std::to_string(indices.front()) + (again ? " again" : ""));
  }
  bool holds_nothing() const {
    return std::all_of(held_.begin(), held_.end(), [](const auto& entry) { return entry.second == 0; });
  }
  std::vector<std::string> events;

 private:
  std::map<std::size_t, const Tensor*> source_;
  std::map<std::size_t, int> held_;
};

struct ProvidedRun {
  double loss = 0, evaluation = 0;
  std::map<std::size_t, std::vector<float>> gradients;
  std::vector<std::string> events;
};

const GptConfig kConfig{"provided", 3, 32, 2, 97, 16};

ProvidedRun run(DType dtype, ParameterResidence residence, ActivationKeep keep, TiedTableGradient table) {
  const auto device = create_device(DeviceOptions{DeviceKind::cpu, std::size_t{1} << 30});
  GptModel whole(*device, kConfig, dtype, {0.1f, 0.1f, 0.1f}, GradientStorage::streamed);
  initialize_gpt_parameters(whole.parameters(), kConfig, 5);
  GptModel provided(*device, kConfig, dtype, {0.1f, 0.1f, 0.1f}, GradientStorage::streamed, {}, ParameterResidence::provided);
  GptModel& model = residence == ParameterResidence::whole ? whole : provided;
  CopyingProvider provider(whole.parameters());
  provided.set_parameter_provider(&provider);
  EXPECT_TRUE(provided.parameters().named().empty());
  model.set_loss_chunk(10);
  model.set_tied_table_gradient(table);
  testing::HostGradientSink sink(model.parameter_specs());
  model.set_gradient_sink(&sink);
  const Tensor tokens = testing::random_tokens(*device, 3, 2, 16, kConfig.vocab);
  const Tensor targets = testing::random_tokens(*device, 4, 2, 16, kConfig.vocab);
  ProvidedRun result;
  result.loss = model.train_micro_batch(tokens, targets, {9, 1, 0}, 1.0f, std::vector<ActivationKeep>(3, keep));
  result.gradients = sink.gradients;
  result.events = provider.events;
  result.evaluation = model.evaluate(tokens, targets);
  EXPECT_TRUE(provider.holds_nothing());
  EXPECT_TRUE(provided.parameters().named().empty()) << "a provided model holds parameters between layers";
  return result;
}

TEST(ProvidedParameters, TrainBitwiseAsWholeParameters) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const ActivationKeep keep : {ActivationKeep::all, ActivationKeep::selective, ActivationKeep::input_only}) {
      for (const TiedTableGradient table : {TiedTableGradient::as_computed, TiedTableGradient::deferred}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " keep " + std::to_string(static_cast<int>(keep)) + " table " +
                     std::to_string(static_cast<int>(table)));
        const ProvidedRun whole = run(dtype, ParameterResidence::whole, keep, table);
        const ProvidedRun provided = run(dtype, ParameterResidence::provided, keep, table);
        EXPECT_EQ(provided.loss, whole.loss);
        EXPECT_EQ(provided.evaluation, whole.evaluation);
        ASSERT_EQ(provided.gradients.size(), whole.gradients.size());
        for (const auto& [index, values] : whole.gradients) EXPECT_EQ(provided.gradients.at(index), values) << "parameter " << index;
        EXPECT_TRUE(whole.events.empty());  // a whole model asks no provider
      }
    }
  }
}

TEST(ProvidedParameters, EachBlockOnceInForwardAndOnceInBackwardWithTheNextPrefetched) {
  // Blocks start at indices 2, 14 and 26; ln_f is 38; the token table 0.
  const ProvidedRun run_full = run(DType::f32, ParameterResidence::provided, ActivationKeep::input_only, TiedTableGradient::as_computed);
  const std::vector<std::string>& training = run_full.events;
  const std::vector<std::string> expected = {
      "acquire 0", "prefetch 2", "release 0",                                         // embedding, block 0 next
      "acquire 2", "prefetch 14", "release 2 again", "acquire 14", "prefetch 26", "release 14 again",
      "acquire 26", "prefetch 0", "release 26 again",                                 // the last block prefetches the table
      "acquire 38", "acquire 0", "prefetch 26", "release 0", "release 38",            // the head, the last block next
      "acquire 26", "prefetch 14", "release 26", "acquire 14", "prefetch 2", "release 14",  // backward, downwards
      "acquire 2", "release 2"};                                                       // block 0 prefetches nothing
  EXPECT_EQ(training, expected);
  // A full recompute inside each backward acquires nothing more: three blocks, two acquires each, and
  // the embedding, the final LayerNorm and the table once.
  const std::int64_t acquires = std::count_if(training.begin(), training.end(),
                                              [](const std::string& event) { return event.starts_with("acquire"); });
  EXPECT_EQ(acquires, 3 * 2 + 3);
}

TEST(ProvidedParameters, ALayerWithoutAProviderIsRefused) {
  const auto device = create_device(DeviceOptions{DeviceKind::cpu, std::size_t{1} << 30});
  GptModel model(*device, kConfig, DType::f32, {}, GradientStorage::streamed, {}, ParameterResidence::provided);
  const Tensor tokens = testing::random_tokens(*device, 3, 2, 16, kConfig.vocab);
  try {
    model.evaluate(tokens, tokens);
    FAIL() << "evaluated without parameters";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("before it was given a provider"), std::string::npos) << error.what();
  }
  EXPECT_THROW(GptModel(*device, kConfig, DType::f32, {}, GradientStorage::whole, {}, ParameterResidence::provided), std::invalid_argument);
}

}  // namespace
}  // namespace ferry
