// PartitionedParameters on one rank (the gather is a copy, so what a layer sees is the partition): the
// views hold the partition's values in the parameters' shapes; one prefetch at most; a block kept from
// forward to backward is not gathered again, and freed on its last release; releases of what was not
// acquired are refused; the bytes allocated while a gather is held are gathered_bytes(); the gather
// policy's bounds: no prefetch when it is off, and nothing kept or prefetched past max_live_elements.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/device.h"
#include "engine/grid/flat_layout.h"
#include "engine/grid/partitioned_parameters.h"

namespace ferry {
namespace {

struct Fixture {
  std::unique_ptr<Device> device = create_device(DeviceOptions{});
  std::unique_ptr<Communicator> dp = make_single_rank_communicator();
  // Four parameters: a [3, 4] matrix and its bias [4] (indices 0, 1), then another pair (indices 2, 3).
  std::vector<ParameterSpec> specs = {{"a.weight", {3, 4}, 0}, {"a.bias", {4}, 1}, {"b.weight", {4, 2}, 2}, {"b.bias", {2}, 3}};
  FlatLayout layout{{12, 4, 8, 2}, 1};
  std::int64_t allocated() const { return device->allocator().statistics().allocated_bytes.all().current; }
};

TEST(PartitionedParameters, GathersThePartitionsValuesInTheParametersShapes) {
  Fixture f;
  PartitionedParameters parameters(*f.device, f.specs, DType::f32, f.layout, f.layout.partition(0), *f.dp, GatherPolicy{});
  std::vector<float> values(26);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  parameters.partition().copy_from_host(values.data());
  const std::vector<std::size_t> b = {2, 3};
  const std::int64_t before = f.allocated();
  {
    const std::vector<Tensor> held = parameters.acquire(b);
    EXPECT_EQ(f.allocated() - before, parameters.gathered_bytes(b));
    ASSERT_EQ(held.size(), 2u);
    EXPECT_EQ(held[0].shape(), (Shape{4, 2}));
    EXPECT_EQ(held[1].shape(), (Shape{2}));
    EXPECT_EQ(copy_to_host_f32(held[0]), std::vector<float>(values.begin() + 16, values.begin() + 24));
    EXPECT_EQ(copy_to_host_f32(held[1]), std::vector<float>(values.begin() + 24, values.end()));
  }
  parameters.release(b, false);
  EXPECT_EQ(f.allocated(), before);
}

TEST(PartitionedParameters, OnePrefetchAtMost) {
  Fixture f;
  PartitionedParameters parameters(*f.device, f.specs, DType::f32, f.layout, f.layout.partition(0), *f.dp, GatherPolicy{});
  const std::vector<std::size_t> a = {0, 1}, b = {2, 3};
  parameters.prefetch(a);
  parameters.prefetch(b);  // a second one while the first waits: not started
  EXPECT_EQ(parameters.gathers(), 1);
  parameters.acquire(a);
  EXPECT_EQ(parameters.gathers(), 1);  // the prefetch
  parameters.acquire(b);
  EXPECT_EQ(parameters.gathers(), 2);  // gathered when asked
  parameters.release(a, false);
  parameters.release(b, false);
  EXPECT_THROW(parameters.release(b, false), std::logic_error);
  EXPECT_THROW(parameters.acquire(std::vector<std::size_t>{1, 0}), std::logic_error);  // not increasing
  EXPECT_THROW(parameters.acquire(std::vector<std::size_t>{7}), std::out_of_range);
}

TEST(PartitionedParameters, KeptFromForwardToBackwardWithoutResharding) {
  for (const bool reshard : {true, false}) {
    Fixture f;
    PartitionedParameters parameters(*f.device, f.specs, DType::f32, f.layout, f.layout.partition(0), *f.dp, GatherPolicy{.reshard_after_forward = reshard});
    const std::vector<std::size_t> a = {0, 1};
    const std::int64_t partition_only = f.allocated();
    { parameters.acquire(a); }
    parameters.release(a, /*again=*/true);  // forward
    EXPECT_EQ(f.allocated() - partition_only, reshard ? 0 : parameters.gathered_bytes(a));
    { parameters.acquire(a); }
    EXPECT_EQ(parameters.gathers(), reshard ? 2 : 1);  // the backward gathers again only when resharded
    parameters.release(a, /*again=*/false);
    EXPECT_EQ(f.allocated(), partition_only);
  }
}

TEST(PartitionedParameters, PrefetchOffGathersEachLayerWhenItStarts) {
  Fixture f;
  PartitionedParameters parameters(*f.device, f.specs, DType::f32, f.layout, f.layout.partition(0), *f.dp, GatherPolicy{.prefetch = false});
  const std::vector<std::size_t> a = {0, 1}, b = {2, 3};
  const std::int64_t partition_only = f.allocated();
  parameters.prefetch(b);
  EXPECT_EQ(parameters.gathers(), 0);
  EXPECT_EQ(f.allocated(), partition_only);
  parameters.acquire(b);
  EXPECT_EQ(parameters.gathers(), 1);
  parameters.release(b, false);
  EXPECT_EQ(f.allocated(), partition_only);
}

TEST(PartitionedParameters, MaxLiveElementsBoundWhatIsKeptAndPrefetched) {
  // a is 16 elements, b 10: a bound of 16 keeps a for its backward, and then has no room for b's prefetch
  // nor for keeping b; b's own gather (its layer runs) is always made.
  Fixture f;
  PartitionedParameters parameters(*f.device, f.specs, DType::f32, f.layout, f.layout.partition(0), *f.dp,
                                   GatherPolicy{.reshard_after_forward = false, .prefetch = true, .max_live_elements = 16});
  const std::vector<std::size_t> a = {0, 1}, b = {2, 3};
  const std::int64_t partition_only = f.allocated();
  parameters.acquire(a);
  parameters.release(a, /*again=*/true);  // kept: 16 <= 16
  EXPECT_EQ(f.allocated() - partition_only, parameters.gathered_bytes(a));
  parameters.prefetch(b);  // 16 kept + 10 > 16: skipped
  EXPECT_EQ(parameters.gathers(), 1);
  parameters.acquire(b);
  EXPECT_EQ(parameters.gathers(), 2);
  parameters.release(b, /*again=*/true);  // 16 kept + 10 > 16: resharded
  EXPECT_EQ(f.allocated() - partition_only, parameters.gathered_bytes(a));
  parameters.acquire(b);
  EXPECT_EQ(parameters.gathers(), 3);  // b's backward gathers it again, a's does not
  parameters.release(b, false);
  parameters.acquire(a);
  EXPECT_EQ(parameters.gathers(), 3);
  parameters.release(a, false);
  EXPECT_EQ(f.allocated(), partition_only);
}

}  // namespace
}  // namespace ferry
