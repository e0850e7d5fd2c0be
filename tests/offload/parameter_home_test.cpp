// ParameterHome (ZeRO-Infinity's parameter offload): a partition stored in uneven ranges comes back
// byte for byte from any range, from pinned host memory and from an NVMe file read through buffers
// smaller than the range (several pieces, the file's odd tail included, f32 and bf16); a read-ahead is
// used when its range is fetched and dropped when another is, and reads as many layers ahead as its
// buffers hold, keeping what a later one still asks for; a second pass replaces the first; the
// NVMe home holds its buffers and no more host memory whatever the partition's size; misuse and an
// injected read or write error fail with the range or the file named, and after a failed write the store
// refuses further work.
#include "offload/parameter_home.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "engine/core/tensor.h"
#include "offload/nvme_store.h"
#include "tests/offload/nvme_test_support.h"

namespace ferry::offload {
namespace {

using testing::TemporaryDirectory;
using testing::fill_random;

constexpr std::size_t kChunk = 4096;

struct Home {
  std::unique_ptr<Device> device = create_device(DeviceOptions{});
  TemporaryDirectory directory;
  std::unique_ptr<NvmeStore> store;
  std::unique_ptr<ParameterHome> home;

  Home(bool nvme, std::int64_t elements, DType dtype, int buffers = 2, std::size_t buffer_bytes = 3 * kChunk) {
    if (!nvme) {
      home = make_host_parameter_home(*device, elements, dtype, nullptr);
      return;
    }
    NvmeStoreOptions options;
    options.directory = directory.path() + "/rank-0";
    options.chunk_bytes = kChunk;
    store = std::make_unique<NvmeStore>(options);
    home = make_nvme_parameter_home(*device, *store, elements, dtype, buffers, buffer_bytes, nullptr);
  }
  // Stores `values` as one pass in ranges of the given sizes (the rest as the last).
  void store_pass(const std::vector<std::byte>& values, const std::vector<std::int64_t>& sizes) {
    const std::size_t element = dtype_size(home->dtype());
    std::int64_t at = 0;
    for (std::size_t i = 0; at < home->elements(); ++i) {
      const std::int64_t count = i < sizes.size() ? std::min(sizes[i], home->elements() - at) : home->elements() - at;
      home->store({at, count}, values.data() + static_cast<std::size_t>(at) * element);
      at += count;
    }
    home->flush();
  }
  std::vector<std::byte> fetched(ElementRange range) {
    Tensor destination = Tensor::empty(*device, {std::max<std::int64_t>(range.count, 1)}, home->dtype(), MemoryCategory::parameters, "gathered");
    home->fetch(range, destination.data());
    const auto* bytes = static_cast<const std::byte*>(destination.data());
    return {bytes, bytes + static_cast<std::size_t>(range.count) * dtype_size(home->dtype())};
  }
};

std::vector<std::byte> random_values(std::int64_t elements, DType dtype, std::uint64_t seed) {
  std::vector<std::byte> values(static_cast<std::size_t>(elements) * dtype_size(dtype));
  fill_random(values.data(), values.size(), seed);
  return values;
}

std::vector<std::byte> slice(const std::vector<std::byte>& values, ElementRange range, DType dtype) {
  const std::size_t element = dtype_size(dtype);
  return {values.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(range.begin) * element),
          values.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(range.begin + range.count) * element)};
}

class EveryHome : public ::testing::TestWithParam<std::tuple<bool, DType>> {};

TEST_P(EveryHome, FetchesAnyRangeOfWhatWasStored) {
  const auto [nvme, dtype] = GetParam();
  const std::int64_t elements = 10'007;  // an odd tail past the last whole chunk
  Home home(nvme, elements, dtype);
  const std::vector<std::byte> values = random_values(elements, dtype, 1);
  home.store_pass(values, {1000, 37, 4096, 1});
  std::mt19937_64 generator(2);
  std::vector<ElementRange> ranges = {{0, elements}, {0, 1}, {elements - 1, 1}, {1023, 2}, {3000, 5000}, {500, 0}};
  for (int i = 0; i < 20; ++i) {
    const auto begin = static_cast<std::int64_t>(generator() % static_cast<std::uint64_t>(elements));
    ranges.push_back({begin, static_cast<std::int64_t>(generator() % static_cast<std::uint64_t>(elements - begin)) + 1});
  }
  for (const ElementRange& range : ranges) EXPECT_EQ(home.fetched(range), slice(values, range, dtype)) << range.begin << "+" << range.count;

  // Read ahead: the ranges asked for come from it; a range not read ahead drops it and is read anew.
  const std::vector<ElementRange> ahead = {{100, 700}, {2000, 900}};
  home.home->read_ahead(ahead);
  for (const ElementRange& range : ahead) EXPECT_EQ(home.fetched(range), slice(values, range, dtype));
  home.home->read_ahead(ahead);
  EXPECT_EQ(home.fetched({5000, 3000}), slice(values, {5000, 3000}, dtype));
  EXPECT_EQ(home.fetched(ahead[1]), slice(values, ahead[1], dtype));

  // A second pass replaces the first.
  const std::vector<std::byte> updated = random_values(elements, dtype, 3);
  home.store_pass(updated, {4999});
  EXPECT_EQ(home.fetched({0, elements}), updated);
}

INSTANTIATE_TEST_SUITE_P(ParameterHome, EveryHome,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& test) {
                           return std::string(std::get<0>(test.param) ? "nvme_" : "cpu_") + std::string(dtype_name(std::get<1>(test.param)));
                         });

// The read-ahead of several layers: as many pieces, from the first, as the free buffers hold; what a
// later read-ahead still asks for stays read (not read again); fetch() reads only what was not ahead.
TEST(ParameterHome, NvmeReadsAheadSeveralLayersAndKeepsWhatIsStillAsked) {
  const std::int64_t elements = 8 * 1024;  // f32: 8 chunks, one a layer of 1024 elements
  Home home(true, elements, DType::f32, 3, kChunk);
  const std::vector<std::byte> values = random_values(elements, DType::f32, 5);
  home.store_pass(values, {});
  const auto layer = [](std::int64_t i) { return ElementRange{i * 1024, 1024}; };
  const std::uint64_t stored_reads = home.home->bytes_read();
  // Four layers asked, three buffers: the first three are read ahead, the fourth is not.
  const std::vector<ElementRange> four = {layer(1), layer(2), layer(3), layer(4)};
  home.home->read_ahead(four);
  EXPECT_EQ(home.home->bytes_read() - stored_reads, 3 * kChunk);
  EXPECT_EQ(home.fetched(layer(1)), slice(values, layer(1), DType::f32));
  EXPECT_EQ(home.home->bytes_read_on_fetch(), 0u);
  // The next read-ahead keeps layers 2 and 3 as they are and reads layer 4 into the freed buffer.
  const std::vector<ElementRange> next = {layer(2), layer(3), layer(4)};
  home.home->read_ahead(next);
  EXPECT_EQ(home.home->bytes_read() - stored_reads, 4 * kChunk);
  for (const ElementRange& range : next) EXPECT_EQ(home.fetched(range), slice(values, range, DType::f32));
  EXPECT_EQ(home.home->bytes_read_on_fetch(), 0u);
  // A layer not read ahead is read by fetch(), and counted so.
  EXPECT_EQ(home.fetched(layer(6)), slice(values, layer(6), DType::f32));
  EXPECT_EQ(home.home->bytes_read_on_fetch(), kChunk);
  EXPECT_EQ(home.home->bytes_read() - stored_reads, 5 * kChunk);
}

TEST(ParameterHome, NvmeHoldsItsBuffersAndNoMoreHostMemory) {
  Home large(true, 1'000'000, DType::f32, 3, 2 * kChunk + 100);  // rounded down to whole chunks
  EXPECT_EQ(large.home->host_bytes(), static_cast<std::int64_t>(3 * 2 * kChunk));
  EXPECT_EQ(large.home->nvme_bytes(), 4'000'000u);
  Home small(true, 10, DType::f32, 5, 16 * kChunk);  // no buffer larger than the partition's chunks
  EXPECT_EQ(small.home->host_bytes(), static_cast<std::int64_t>(5 * kChunk));
  Home host(false, 1'000'000, DType::bf16);
  EXPECT_EQ(host.home->host_bytes(), 2'000'000);
  EXPECT_THROW(Home(true, 10, DType::f32, 2, kChunk - 1), std::invalid_argument);
}

TEST(ParameterHome, MisuseIsRefused) {
  Home home(true, 5000, DType::f32);
  std::vector<std::byte> values = random_values(5000, DType::f32, 4);
  EXPECT_THROW(home.fetched({0, 10}), std::logic_error);  // nothing stored yet
  home.home->store({0, 100}, values.data());
  EXPECT_THROW(home.home->store({200, 100}, values.data()), std::logic_error);  // a gap
  EXPECT_THROW(home.home->flush(), std::logic_error);                            // a partial pass
  home.store_pass(values, {});
  EXPECT_THROW(home.fetched({4990, 11}), std::out_of_range);
  EXPECT_THROW(home.home->store({-1, 1}, values.data()), std::out_of_range);
}

TEST(ParameterHome, ReadErrorNamesTheFile) {
  Home home(true, 5000, DType::f32);
  home.store_pass(random_values(5000, DType::f32, 5), {});
  home.store->set_fault_injector([](IoDirection direction, const std::string&, std::uint64_t offset, std::size_t) -> std::optional<IoFault> {
    if (direction == IoDirection::read && offset == kChunk) return IoFault{EIO, 0};
    return std::nullopt;
  });
  try {
    home.fetched({0, 5000});
    FAIL() << "an injected EIO was not reported";
  } catch (const NvmeError& error) {
    EXPECT_NE(std::string(error.what()).find("parameters.bin"), std::string::npos) << error.what();
    EXPECT_EQ(error.offset(), kChunk);
  }
}

TEST(ParameterHome, WriteErrorNamesTheFileAndTheStoreRefusesFurtherWork) {
  Home home(true, 5000, DType::f32, 2, kChunk);
  const std::vector<std::byte> values = random_values(5000, DType::f32, 6);
  home.store_pass(values, {});
  home.store->set_fault_injector([](IoDirection direction, const std::string&, std::uint64_t offset, std::size_t) -> std::optional<IoFault> {
    if (direction == IoDirection::write && offset == 2 * kChunk) return IoFault{ENOSPC, 0};
    return std::nullopt;
  });
  try {
    home.store_pass(random_values(5000, DType::f32, 7), {});
    FAIL() << "an injected ENOSPC was not reported";
  } catch (const NvmeError& error) {
    EXPECT_NE(std::string(error.what()).find("parameters.bin"), std::string::npos) << error.what();
    EXPECT_EQ(error.error_number(), ENOSPC);
  }
  // Part of the pass reached the file: nothing more is read from it (the run resumes from a checkpoint).
  EXPECT_THROW(home.fetched({0, 5000}), NvmeError);
}

}  // namespace
}  // namespace ferry::offload
