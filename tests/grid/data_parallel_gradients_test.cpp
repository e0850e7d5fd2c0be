// DataParallelGradients at ZeRO 2 in a pipeline step, on one rank (the reduction is a copy, so what lands
// is exactly what was accumulated): buckets complete in whichever micro-batches their parameters do,
// the tied table is held whole for the stages' sum, and what is still open at the step's end is reduced
// then; nothing is lost or counted twice.
#include "engine/grid/data_parallel_gradients.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace ferry {
namespace {

Tensor filled(Device& device, std::int64_t elements, float value) {
  std::vector<float> values(static_cast<std::size_t>(elements), value);
  Tensor tensor = Tensor::zeros(device, {elements}, DType::f32, MemoryCategory::activation_gradients, "g");
  copy_from_host_f32(tensor, values.data());
  return tensor;
}

TEST(DataParallelGradients, AStage2PipelineStepLandsEveryMicroBatchOnceWhateverTheOrder) {
  auto device = create_device(DeviceOptions{});
  const std::unique_ptr<Communicator> dp = make_single_rank_communicator();
  // Three parameters: the tied table (held), then two of a second stage (a cut between them and the table).
  const Tensor table = Tensor::zeros(*device, {4}, DType::f32, MemoryCategory::parameters, "wte");
  const Tensor a = Tensor::zeros(*device, {6}, DType::f32, MemoryCategory::parameters, "a");
  const Tensor b = Tensor::zeros(*device, {5}, DType::f32, MemoryCategory::parameters, "b");
  const std::vector<NamedTensor> parameters = {{"wte", &table, 0}, {"a", &a, 1}, {"b", &b, 2}};
  DataParallelGradients gradients(*device, specs_of(parameters), *dp, 2, /*bucket_elements=*/0, true, false, {0, {1}, {}});
  gradients.begin_step();
  gradients.accumulate_whole_step();
  // Micro-batch 1: every parameter completes (the bucket of a and b is reduced).
  gradients.accumulate(1, 0, filled(*device, 6, 1.0f));
  gradients.accumulate(2, 0, filled(*device, 5, 2.0f));
  gradients.accumulate(0, 0, filled(*device, 4, 3.0f));
  for (std::size_t index : {1u, 2u, 0u}) gradients.parameter_complete(index);
  // Micro-batch 2: b and the table complete, a only accumulates (its bucket stays open).
  gradients.accumulate(2, 0, filled(*device, 5, 20.0f));
  gradients.parameter_complete(2);
  gradients.accumulate(0, 0, filled(*device, 4, 30.0f));
  gradients.parameter_complete(0);
  gradients.accumulate(1, 0, filled(*device, 6, 10.0f));
  // The table's gradient is whole until the stages have summed it (here: 100 added); no other is.
  Tensor held = gradients.accumulated_gradient(0);
  EXPECT_EQ(copy_to_host_f32(held), std::vector<float>(4, 33.0f));
  held.narrow(0, 0, 4).copy_from(filled(*device, 4, 133.0f));
  EXPECT_THROW(gradients.accumulated_gradient(1), std::logic_error);
  gradients.reduce_accumulated();
  gradients.finish_step();
  std::vector<float> expected(4, 133.0f);
  expected.insert(expected.end(), 6, 11.0f);
  expected.insert(expected.end(), 5, 22.0f);
  const std::vector<float> owned = copy_to_host_f32(gradients.owned_gradients());
  EXPECT_EQ(std::vector<float>(owned.begin(), owned.begin() + 15), expected);
  // The next step starts from zero.
  gradients.begin_step();
  gradients.accumulate_whole_step();
  gradients.reduce_accumulated();
  gradients.finish_step();
  for (float value : copy_to_host_f32(gradients.owned_gradients())) EXPECT_EQ(value, 0.0f);
}

TEST(DataParallelGradients, AStage2StepReducesBucketsAsTheirElementsCompleteWithFewOpen) {
  // Buckets of 2500 elements cut across three parameters; the middle one comes in row slices of 2000
  // (each complete when handed over), the others whole. What lands is exactly what was accumulated, and
  // the device never holds more than the partition and a few buckets, whatever a parameter's size.
  auto device = create_device(DeviceOptions{});
  const std::unique_ptr<Communicator> dp = make_single_rank_communicator();
  const Tensor a = Tensor::zeros(*device, {4000}, DType::f32, MemoryCategory::parameters, "a");
  const Tensor b = Tensor::zeros(*device, {10000}, DType::f32, MemoryCategory::parameters, "b");
  const Tensor c = Tensor::zeros(*device, {3000}, DType::f32, MemoryCategory::parameters, "c");
  const std::vector<NamedTensor> parameters = {{"a", &a, 0}, {"b", &b, 1}, {"c", &c, 2}};
  DataParallelGradients gradients(*device, specs_of(parameters), *dp, 2, /*bucket_elements=*/2500);
  EXPECT_EQ(gradients.buckets().size(), 7u);  // 17000 = 2000 + 6 x 2500
  const auto gradient_peak = [&] { return device->allocator().statistics().category_allocated_bytes[category_index(MemoryCategory::gradients)].peak; };
  const std::int64_t partition = gradient_peak();
  device->allocator().reset_peak_statistics();
  gradients.begin_step();
  for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
    gradients.begin_micro_batch(micro_batch == 1);
    gradients.accumulate(2, 0, filled(*device, 3000, 3.0f));  // backward's order: the last parameter first
    gradients.parameter_complete(2);
    for (std::int64_t first = 0; first < 10000; first += 2000) {
      gradients.accumulate(1, first, filled(*device, 2000, 2.0f));
      gradients.piece_complete(1, first, 2000);
    }
    gradients.parameter_complete(1);
    EXPECT_THROW(gradients.piece_complete(0, 100, 10), std::logic_error);  // out of order: the first 100 are not complete
    gradients.accumulate(0, 0, filled(*device, 4000, 1.0f));
    gradients.parameter_complete(0);
    EXPECT_THROW(gradients.parameter_complete(0), std::logic_error);
  }
  gradients.finish_step();
  std::vector<float> expected(4000, 2.0f);
  expected.insert(expected.end(), 10000, 4.0f);
  expected.insert(expected.end(), 3000, 6.0f);
  EXPECT_EQ(copy_to_host_f32(gradients.owned_gradients()), expected);
  const std::int64_t bucket_bytes = 2500 * 4 + 512;  // a bucket and its rounding
  // At most six buckets: two waiting for the parameter before them (b|c opened by c, a|b by b's first
  // slice), two under the current slice, two in flight. Cut at whole parameters, b alone was 40000 bytes.
  EXPECT_LE(gradient_peak() - partition, 6 * bucket_bytes);
}

}  // namespace
}  // namespace ferry
