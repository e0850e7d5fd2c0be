// The NCCL backend under mpirun (comm_nccl_tests, built with CUDA and NCCL): all_reduce sum, average
// and max in f32, f64, i64 and bf16; reduce_scatter and all_gather with equal and variable counts
// (empty blocks, in place); split; broadcast of device and host bytes; send and receive, and an exchange
// of both at once; bytes_sent
// by the ring figures. NCCL takes one GPU per rank: every test skips where this machine has fewer GPUs
// than the job has ranks (and says so), so that without a GPU the backend is compiled, not run. The
// emulated build (tests/cuda_emulation: NCCL over MPI) runs it in CI, each rank with an emulated GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "allocator/cuda_check.h"
#include "engine/comm/nccl_communicator.h"
#include "tests/comm/mpi_test_world.h"

namespace ferry {
namespace {

using testing::world;

int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// Why this job cannot run NCCL, or empty. Every rank of the job sees the same machine, so all skip or
// none does (a rank that skipped would leave the others waiting in a collective).
std::string reason_to_skip() {
  const int gpus = visible_gpus();
  if (gpus == 0) return "no GPU: the NCCL backend is compiled, not run";
#ifdef FERRY_CUDA_EMULATION
  return "";  // every process has an emulated GPU of its own
#endif
  if (gpus < world().size()) {
    return std::to_string(gpus) + " GPU(s) for " + std::to_string(world().size()) +
           " ranks: NCCL takes one GPU per rank; the NCCL backend is compiled, not run";
  }
  return "";
}

// A device copy of `values` (cudaMalloc; cudaMemcpy on the legacy default stream, which the
// communicator's stream waits for).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& values) : count_(values.size()) {
    FERRY_CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(count_, 1) * sizeof(T)));
    if (count_ != 0) FERRY_CUDA_CHECK(cudaMemcpy(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(std::size_t count) : DeviceBuffer(std::vector<T>(count)) {}
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  std::vector<T> read() const {
    std::vector<T> values(count_);
    if (count_ != 0) FERRY_CUDA_CHECK(cudaMemcpy(values.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return values;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_;
};

// bf16 of a float whose low 16 bits are zero (small integers): exact both ways.
std::uint16_t to_bf16(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}
float from_bf16(std::uint16_t value) {
  const std::uint32_t bits = static_cast<std::uint32_t>(value) << 16;
  float result = 0;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  // One NCCL communicator for the whole suite (ncclCommInitRank takes a while), gone before MPI is.
  static void SetUpTestSuite() {
    if (reason_to_skip().empty()) nccl_ = make_nccl_communicator(world()).release();
  }
  static void TearDownTestSuite() {
    delete nccl_;
    nccl_ = nullptr;
  }
  void SetUp() override {
    const std::string reason = reason_to_skip();
    if (!reason.empty()) GTEST_SKIP() << reason;
    ASSERT_NE(nccl_, nullptr);
  }
  NcclCommunicator& nccl() { return *nccl_; }
  int rank() { return nccl_->rank(); }
  int ranks() { return nccl_->size(); }

 private:
  static NcclCommunicator* nccl_;
};
NcclCommunicator* NcclCommunicatorTest::nccl_ = nullptr;

TEST_F(NcclCommunicatorTest, MatchesTheBootstrap) {
  EXPECT_EQ(nccl().backend(), "nccl");
  EXPECT_EQ(nccl().rank(), world().rank());
  EXPECT_EQ(nccl().size(), world().size());
  EXPECT_EQ(nccl().local_rank(), world().local_rank());
  EXPECT_EQ(nccl().device(), world().local_rank() % visible_gpus());
  EXPECT_EQ(nccl().timeout(), world().timeout());
  EXPECT_NE(nccl().stream(), nullptr);
  EXPECT_TRUE(nccl_backend_built());
}

TEST_F(NcclCommunicatorTest, AllReduceSumsAveragesAndTakesTheLargest) {
  constexpr std::size_t kCount = 1000;
  const auto p = static_cast<double>(ranks());
  std::vector<float> values(kCount);
  for (std::size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(rank() + 1) + static_cast<float>(i % 7);
  const std::uint64_t before = nccl().bytes_sent();

  DeviceBuffer<float> sum(values);
  nccl().all_reduce(sum.data(), kCount, CommDataType::f32, ReduceOperation::sum);
  // sum over ranks r of (r + 1 + i % 7) = p (p + 1) / 2 + p (i % 7)
  const std::vector<float> sums = sum.read();
  for (std::size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(sums[i], static_cast<float>(p * (p + 1) / 2 + p * static_cast<double>(i % 7))) << "element " << i;
  }
  // Ring figure: floor(2 n (p - 1) / p) for n = 4000 bytes.
  EXPECT_EQ(nccl().bytes_sent() - before, 2 * kCount * 4 * (ranks() - 1) / ranks());

  std::vector<double> doubles(kCount);
  for (std::size_t i = 0; i < kCount; ++i) doubles[i] = static_cast<double>(rank()) + static_cast<double>(i);
  DeviceBuffer<double> average(doubles);
  nccl().all_reduce(average.data(), kCount, CommDataType::f64, ReduceOperation::average);
  const std::vector<double> averages = average.read();
  for (std::size_t i = 0; i < kCount; ++i) {
    ASSERT_NEAR(averages[i], (p - 1) / 2 + static_cast<double>(i), 1e-12) << "element " << i;
  }

  DeviceBuffer<std::int64_t> largest(std::vector<std::int64_t>{rank() * 10, -rank(), 7});
  nccl().all_reduce(largest.data(), 3, CommDataType::i64, ReduceOperation::max);
  EXPECT_EQ(largest.read(), (std::vector<std::int64_t>{(ranks() - 1) * 10, 0, 7}));

  DeviceBuffer<std::uint16_t> half(std::vector<std::uint16_t>{to_bf16(1.0f), to_bf16(static_cast<float>(rank()))});
  nccl().all_reduce(half.data(), 2, CommDataType::bf16, ReduceOperation::sum);
  const std::vector<std::uint16_t> halves = half.read();
  EXPECT_EQ(from_bf16(halves[0]), static_cast<float>(p));
  EXPECT_EQ(from_bf16(halves[1]), static_cast<float>(p * (p - 1) / 2));
}

TEST_F(NcclCommunicatorTest, AsyncRequestsCompleteInAnyOrder) {
  DeviceBuffer<float> first(std::vector<float>(64, 1.0f));
  DeviceBuffer<float> second(std::vector<float>(64, 2.0f));
  std::unique_ptr<CommRequest> a = nccl().all_reduce_async(first.data(), 64, CommDataType::f32, ReduceOperation::sum);
  std::unique_ptr<CommRequest> b = nccl().all_reduce_async(second.data(), 64, CommDataType::f32, ReduceOperation::sum);
  b->wait();
  a->wait();
  EXPECT_TRUE(a->test());
  EXPECT_TRUE(b->test());
  EXPECT_EQ(first.read(), std::vector<float>(64, static_cast<float>(ranks())));
  EXPECT_EQ(second.read(), std::vector<float>(64, 2.0f * static_cast<float>(ranks())));
}

// counts of one shape per case: equal, growing, and with an empty block (rank 1's).
std::vector<std::vector<std::size_t>> count_cases(int ranks) {
  std::vector<std::vector<std::size_t>> cases(3);
  for (int r = 0; r < ranks; ++r) {
    cases[0].push_back(5);
    cases[1].push_back(static_cast<std::size_t>(r) + 1);
    cases[2].push_back(r == 1 ? 0 : static_cast<std::size_t>(r) + 2);
  }
  return cases;
}

TEST_F(NcclCommunicatorTest, ReduceScatterWithEqualAndVariableCounts) {
  for (const std::vector<std::size_t>& counts : count_cases(ranks())) {
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::vector<float> input(total);
    for (std::size_t j = 0; j < total; ++j) input[j] = static_cast<float>(rank() * 1000) + static_cast<float>(j);
    const std::size_t own = counts[static_cast<std::size_t>(rank())];
    std::size_t offset = 0;
    for (int r = 0; r < rank(); ++r) offset += counts[static_cast<std::size_t>(r)];

    for (const ReduceOperation operation : {ReduceOperation::sum, ReduceOperation::average}) {
      DeviceBuffer<float> in(input);
      DeviceBuffer<float> out(own);
      const std::uint64_t before = nccl().bytes_sent();
      nccl().reduce_scatter(in.data(), out.data(), counts, CommDataType::f32, operation);
      EXPECT_EQ(nccl().bytes_sent() - before, (total - own) * sizeof(float));
      const std::vector<float> result = out.read();
      const double p = ranks();
      for (std::size_t j = 0; j < own; ++j) {
        // sum over ranks q of (1000 q + offset + j)
        const double sum = 1000 * p * (p - 1) / 2 + p * static_cast<double>(offset + j);
        const double expected = operation == ReduceOperation::sum ? sum : sum / p;
        ASSERT_NEAR(result[j], expected, 1e-3) << "counts " << counts.size() << " element " << j << " "
                                               << reduce_operation_name(operation);
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, AllGatherWithEqualAndVariableCountsInPlaceOrNot) {
  for (const std::vector<std::size_t>& counts : count_cases(ranks())) {
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const std::size_t own = counts[static_cast<std::size_t>(rank())];
    std::size_t offset = 0;
    for (int r = 0; r < rank(); ++r) offset += counts[static_cast<std::size_t>(r)];
    std::vector<std::int64_t> mine(own);
    for (std::size_t j = 0; j < own; ++j) mine[j] = rank() * 100 + static_cast<std::int64_t>(j);
    std::vector<std::int64_t> expected;
    for (int r = 0; r < ranks(); ++r) {
      for (std::size_t j = 0; j < counts[static_cast<std::size_t>(r)]; ++j) {
        expected.push_back(r * 100 + static_cast<std::int64_t>(j));
      }
    }

    DeviceBuffer<std::int64_t> in(mine);
    DeviceBuffer<std::int64_t> out(total);
    const std::uint64_t before = nccl().bytes_sent();
    nccl().all_gather(in.data(), out.data(), counts, CommDataType::i64);
    EXPECT_EQ(nccl().bytes_sent() - before, (total - own) * sizeof(std::int64_t));
    EXPECT_EQ(out.read(), expected);

    std::vector<std::int64_t> in_place_values(total, -1);
    std::copy(mine.begin(), mine.end(), in_place_values.begin() + static_cast<std::ptrdiff_t>(offset));
    DeviceBuffer<std::int64_t> in_place(in_place_values);
    nccl().all_gather(in_place.data() + offset, in_place.data(), counts, CommDataType::i64);
    EXPECT_EQ(in_place.read(), expected);
  }
}

TEST_F(NcclCommunicatorTest, SplitMakesGroupsOfTheirOwn) {
  // Two groups by parity; within each, the reverse order of the ranks.
  const std::unique_ptr<NcclCommunicator> group = nccl().split_nccl(rank() % 2, -rank());
  const int members = (ranks() + 1 - rank() % 2) / 2;
  EXPECT_EQ(group->size(), members);
  EXPECT_EQ(group->rank(), members - 1 - rank() / 2);
  EXPECT_EQ(group->backend(), "nccl");
  EXPECT_EQ(group->device(), nccl().device());
  EXPECT_EQ(group->bytes_sent(), 0U);

  DeviceBuffer<std::int64_t> value(std::vector<std::int64_t>{rank()});
  group->all_reduce(value.data(), 1, CommDataType::i64, ReduceOperation::sum);
  std::int64_t expected = 0;
  for (int r = rank() % 2; r < ranks(); r += 2) expected += r;
  EXPECT_EQ(value.read(), std::vector<std::int64_t>{expected});
  EXPECT_EQ(group->bytes_sent(), static_cast<std::uint64_t>(2 * 8 * (members - 1) / members));

  // The group's host operations run on its bootstrap group.
  const std::vector<std::string> names = group->gather_strings("rank " + std::to_string(rank()), 0);
  EXPECT_EQ(names.size(), group->rank() == 0 ? static_cast<std::size_t>(members) : 0U);
  group->barrier();

  // split() is split_nccl typed as a Communicator.
  const std::unique_ptr<Communicator> whole = nccl().split(0, rank());
  EXPECT_EQ(whole->size(), ranks());
  EXPECT_EQ(whole->backend(), "nccl");
}

TEST_F(NcclCommunicatorTest, BroadcastsDeviceAndHostBytes) {
  const int root = ranks() - 1;
  std::vector<std::uint8_t> bytes(300);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(rank() == root ? i : 0);
  std::vector<std::uint8_t> expected(bytes.size());
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<std::uint8_t>(i);

  DeviceBuffer<std::uint8_t> device_bytes(bytes);
  const std::uint64_t before = nccl().bytes_sent();
  nccl().broadcast(device_bytes.data(), bytes.size(), root);
  EXPECT_EQ(device_bytes.read(), expected);
  nccl().broadcast(bytes.data(), bytes.size(), root);
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(nccl().bytes_sent() - before, rank() == root ? 2 * bytes.size() : 0U);
}

TEST_F(NcclCommunicatorTest, AnExchangeSendsAndReceivesTogether) {
  if (ranks() < 2) GTEST_SKIP() << "one rank: no one to exchange with";
  // A ring: each rank sends to the next and receives from the one before in one exchange (NCCL's sends
  // wait for their receivers, so every rank sending first completes only as one group).
  const int next = (rank() + 1) % ranks(), previous = (rank() + ranks() - 1) % ranks();
  constexpr std::size_t kCount = 64;
  DeviceBuffer<float> out(std::vector<float>(kCount, static_cast<float>(rank() + 1)));
  DeviceBuffer<float> in(kCount);
  const PointToPoint messages[] = {{PointToPoint::Kind::send, out.data(), nullptr, kCount * sizeof(float), next, 3},
                                   {PointToPoint::Kind::receive, nullptr, in.data(), kCount * sizeof(float), previous, 3}};
  const std::uint64_t before = nccl().bytes_sent();
  nccl().exchange_async(messages)->wait();
  EXPECT_EQ(in.read(), std::vector<float>(kCount, static_cast<float>(previous + 1)));
  EXPECT_EQ(nccl().bytes_sent() - before, kCount * sizeof(float));
}

TEST_F(NcclCommunicatorTest, SendsAndReceivesDeviceBytes) {
  if (ranks() < 2) GTEST_SKIP() << "one rank: no one to send to";
  // Rank 0 sends to the last rank, which receives; the others take no part.
  const int last = ranks() - 1;
  DeviceBuffer<float> buffer(std::vector<float>(100, rank() == 0 ? 3.5f : 0.0f));
  const std::uint64_t before = nccl().bytes_sent();
  if (rank() == 0) nccl().send(buffer.data(), 100 * sizeof(float), last, 7);
  if (rank() == last) nccl().receive(buffer.data(), 100 * sizeof(float), 0, 7);
  if (rank() == 0 || rank() == last) {
    EXPECT_EQ(buffer.read(), std::vector<float>(100, 3.5f));
  }
  EXPECT_EQ(nccl().bytes_sent() - before, rank() == 0 ? 400U : 0U);
}

}  // namespace
}  // namespace ferry
