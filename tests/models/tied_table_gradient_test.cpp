// The deferred tied-table gradient (TiedTableGradient::deferred): every parameter's streamed gradient is
// bitwise the as-computed one (f32 and bf16, several loss chunks and vocabulary slices, dropout), the
// table reaches the sink only after the embedding's backward, one complete slice at a time, and the
// device never holds a [vocab, hidden] gradient for it.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/gradient_sink.h"
#include "models/gpt_model.h"
#include "models/tensor_ops.h"
#include "tests/models/host_gradient_sink.h"
#include "tests/models/random_tokens.h"

namespace ferry {
namespace {

// Host copies of the whole gradients, and what of the table completes when.
class HostSink final : public testing::HostGradientSink {
 public:
  explicit HostSink(const GptParameters& parameters) : HostGradientSink(specs_of(parameters.named())) {
    on_accumulate = [this](std::size_t index, const Tensor& gradient) {
      if (index == GptParameters::kWteIndex) {
        ++table_pieces;
        table_piece_elements = std::max(table_piece_elements, gradient.numel());
        if (!embedding_done) ++table_pieces_before_embedding;
      }
      if (index == GptParameters::kWpeIndex) embedding_done = true;
    };
  }
  void piece_complete(std::size_t index, std::int64_t offset, std::int64_t count) override {
    if (index == GptParameters::kWteIndex) completed_table.emplace_back(offset, count);
  }

  std::vector<std::pair<std::int64_t, std::int64_t>> completed_table;
  int table_pieces = 0;
  int table_pieces_before_embedding = 0;
  std::int64_t table_piece_elements = 0;
  bool embedding_done = false;
};

struct TableRun {
  std::map<std::size_t, std::vector<float>> gradients;
  double loss = 0;
  int table_pieces = 0;
  int table_pieces_before_embedding = 0;
  std::int64_t table_piece_elements = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> completed_table;
};

TableRun run(DType dtype, TiedTableGradient mode, std::int64_t loss_chunk, std::int64_t vocab_slice) {
  const auto device = create_device(DeviceOptions{DeviceKind::cpu, std::size_t{1} << 30});
  const GptConfig config{"tied-table", 2, 32, 2, 97, 16};
  GptModel model(*device, config, dtype, {0.1f, 0.1f, 0.1f}, GradientStorage::streamed);
  initialize_gpt_parameters(model.parameters(), config, 5);
  model.set_loss_chunk(loss_chunk);
  model.set_vocab_slice(vocab_slice);
  model.set_tied_table_gradient(mode);
  HostSink sink(model.parameters());
  model.set_gradient_sink(&sink);
  const Tensor tokens = testing::random_tokens(*device, 3, 3, 16, config.vocab);
  const Tensor targets = testing::random_tokens(*device, 4, 3, 16, config.vocab);
  TableRun result;
  result.loss = model.train_micro_batch(tokens, targets, {9, 1, 0}, 1.0f);
  result.gradients = sink.gradients;
  result.table_pieces = sink.table_pieces;
  result.table_pieces_before_embedding = sink.table_pieces_before_embedding;
  result.table_piece_elements = sink.table_piece_elements;
  result.completed_table = sink.completed_table;
  return result;
}

TEST(TiedTableGradient, DeferredIsBitwiseTheAsComputedGradient) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // 48 tokens in chunks of 10 (the last one short), 97 rows in slices of 20 (the last one short).
    const TableRun computed = run(dtype, TiedTableGradient::as_computed, 10, 20);
    const TableRun deferred = run(dtype, TiedTableGradient::deferred, 10, 20);
    EXPECT_EQ(deferred.loss, computed.loss);
    ASSERT_EQ(deferred.gradients.size(), computed.gradients.size());
    for (const auto& [index, values] : computed.gradients) EXPECT_EQ(deferred.gradients.at(index), values) << "parameter " << index;
    // As computed, the head's part comes first (every chunk of every slice); deferred, after the embedding.
    EXPECT_EQ(computed.table_pieces_before_embedding, 5 * 5);
    EXPECT_EQ(deferred.table_pieces_before_embedding, 0);
    EXPECT_EQ(deferred.table_pieces, 5);  // one complete piece per slice
    EXPECT_EQ(deferred.table_piece_elements, 20 * 32);
    const std::vector<std::pair<std::int64_t, std::int64_t>> slices = {{0, 640}, {640, 640}, {1280, 640}, {1920, 640}, {2560, 544}};
    EXPECT_EQ(deferred.completed_table, slices);
  }
}

}  // namespace
}  // namespace ferry
