// Asynchronous collectives under mpirun (2 and 4 ranks): all_reduce, reduce_scatter and all_gather with
// variable counts (one of them zero), in place and not, for f32, f64, bf16, f16 and i64, with sum,
// average and max, give exact values; requests in flight complete in any order of wait(); bf16 and f16
// round once per pairwise combine; bytes_sent follows the ring figures; a collective that one rank
// never joins times out naming itself, and its communicator refuses further work.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_communicator.h"
#include "tests/comm/comm_test_support.h"
#include "tests/comm/comm_values.h"
#include "tests/comm/mpi_test_world.h"

namespace ferry {
namespace {

using testing::contains;
using testing::doubles_of;
using testing::error_of;
using testing::kEveryType;
using testing::values_of;
using testing::world;
using namespace std::chrono_literals;

// Element k of rank r: (r + 1) * base(k), base(k) an even integer from -6 to 6: every sum and average
// over 2 or 4 ranks is an integer below 64, exact in every type and in any order of combining.
double base(std::size_t k) { return 2.0 * (static_cast<double>(k % 7) - 3.0); }
double contribution(int rank, std::size_t k) { return (rank + 1) * base(k); }
std::vector<double> contributions(int rank, std::size_t first, std::size_t count) {
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = contribution(rank, first + i);
  return values;
}
double reduced(std::size_t k, int ranks, ReduceOperation operation) {
  const double rank_sum = ranks * (ranks + 1) / 2.0;
  switch (operation) {
    case ReduceOperation::sum: return rank_sum * base(k);
    case ReduceOperation::average: return rank_sum * base(k) / ranks;
    case ReduceOperation::max: return (base(k) > 0 ? ranks : 1) * base(k);
  }
  return 0;
}
std::string label(CommDataType type, ReduceOperation operation) {
  return std::string(comm_data_type_name(type)) + " " + reduce_operation_name(operation);
}

// One count per rank, rank 1's zero: {2, 0} on 2 ranks, {2, 0, 4, 5} on 4.
std::vector<std::size_t> uneven_counts(int ranks) {
  std::vector<std::size_t> counts;
  for (int r = 0; r < ranks; ++r) counts.push_back(r == 1 ? 0 : static_cast<std::size_t>(r + 2));
  return counts;
}
std::size_t offset_of(const std::vector<std::size_t>& counts, int rank) {
  std::size_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += counts[static_cast<std::size_t>(r)];
  return offset;
}
std::size_t total_of(const std::vector<std::size_t>& counts) { return offset_of(counts, static_cast<int>(counts.size())); }

TEST(CommMpiAsync, AllReduceEveryTypeAndOperation) {
  constexpr std::size_t kCount = 23;
  for (const CommDataType type : kEveryType) {
    for (const ReduceOperation operation : {ReduceOperation::sum, ReduceOperation::average, ReduceOperation::max}) {
      std::vector<std::byte> data = values_of(contributions(world().rank(), 0, kCount), type);
      world().all_reduce_async(data.data(), kCount, type, operation)->wait();
      const std::vector<double> result = doubles_of(data, type);
      for (std::size_t k = 0; k < kCount; ++k) {
        ASSERT_EQ(result[k], reduced(k, world().size(), operation)) << label(type, operation) << " element " << k;
      }
    }
  }
}

void check_reduce_scatter(Communicator& communicator) {
  const std::vector<std::size_t> counts = uneven_counts(communicator.size());
  const std::size_t own = counts[static_cast<std::size_t>(communicator.rank())];
  const std::size_t first = offset_of(counts, communicator.rank());
  for (const CommDataType type : kEveryType) {
    for (const ReduceOperation operation : {ReduceOperation::sum, ReduceOperation::average}) {
      const std::vector<std::byte> input = values_of(contributions(communicator.rank(), 0, total_of(counts)), type);
      std::vector<std::byte> output = values_of(std::vector<double>(own + 1, 42.0), type);
      const std::unique_ptr<CommRequest> request =
          communicator.reduce_scatter_async(input.data(), output.data(), counts, type, operation);
      request->wait();
      EXPECT_TRUE(request->test());
      const std::vector<double> result = doubles_of(output, type);
      for (std::size_t i = 0; i < own; ++i) {
        ASSERT_EQ(result[i], reduced(first + i, communicator.size(), operation)) << label(type, operation) << " " << i;
      }
      EXPECT_EQ(result[own], 42.0) << label(type, operation) << ": wrote past its block";
    }
  }
}

TEST(CommMpiAsync, ReduceScatterWithVariableCountsIncludingZero) { check_reduce_scatter(world()); }

void check_all_gather(Communicator& communicator) {
  const std::vector<std::size_t> counts = uneven_counts(communicator.size());
  const int rank = communicator.rank();
  const std::size_t own = counts[static_cast<std::size_t>(rank)];
  std::vector<double> expected;
  for (int r = 0; r < communicator.size(); ++r) {
    const std::vector<double> block = contributions(r, 100, counts[static_cast<std::size_t>(r)]);
    expected.insert(expected.end(), block.begin(), block.end());
  }
  expected.push_back(-7.0);  // past the end: untouched
  for (const CommDataType type : kEveryType) {
    const std::size_t element_bytes = comm_data_type_size(type);
    const std::vector<std::byte> input = values_of(contributions(rank, 100, own), type);
    std::vector<std::byte> output = values_of(std::vector<double>(total_of(counts) + 1, -7.0), type);
    communicator.all_gather_async(input.data(), output.data(), counts, type)->wait();
    EXPECT_EQ(doubles_of(output, type), expected) << comm_data_type_name(type);

    std::vector<double> own_block_only(total_of(counts) + 1, -7.0);
    for (std::size_t i = 0; i < own; ++i) own_block_only[offset_of(counts, rank) + i] = contribution(rank, 100 + i);
    std::vector<std::byte> in_place = values_of(own_block_only, type);
    const std::byte* own_block = in_place.data() + offset_of(counts, rank) * element_bytes;
    communicator.all_gather_async(own_block, in_place.data(), counts, type)->wait();
    EXPECT_EQ(doubles_of(in_place, type), expected) << comm_data_type_name(type) << " in place";
  }
}

TEST(CommMpiAsync, AllGatherWithVariableCountsInPlaceAndNot) { check_all_gather(world()); }

// Chunks of 6 bytes (3 bf16, 1 f64 or i64): one reduce or broadcast per chunk and block owner.
TEST(CommMpiAsync, SmallChunksGiveTheSameResults) {
  std::unique_ptr<Communicator> chunked =
      make_mpi_communicator(detect_rank_environment(), MpiCommunicatorOptions{.max_message_chunk_bytes = 6});
  chunked->set_timeout(world().timeout());
  check_reduce_scatter(*chunked);
  check_all_gather(*chunked);
  std::vector<std::byte> data = values_of(contributions(chunked->rank(), 0, 11), CommDataType::bf16);
  chunked->all_reduce(data.data(), 11, CommDataType::bf16, ReduceOperation::average);
  const std::vector<double> averages = doubles_of(data, CommDataType::bf16);
  for (std::size_t k = 0; k < 11; ++k) EXPECT_EQ(averages[k], reduced(k, chunked->size(), ReduceOperation::average));
}

TEST(CommMpiAsync, RequestsInFlightCompleteInAnyOrder) {
  const int rank = world().rank();
  const int ranks = world().size();
  std::vector<std::byte> first = values_of(contributions(rank, 0, 40), CommDataType::f32);
  const std::vector<std::size_t> counts(static_cast<std::size_t>(ranks), 3);
  const std::vector<std::byte> input = values_of(contributions(rank, 0, 3 * static_cast<std::size_t>(ranks)),
                                                 CommDataType::bf16);
  std::vector<std::byte> second = values_of(std::vector<double>(3, 0.0), CommDataType::bf16);
  std::vector<std::int64_t> gathered(static_cast<std::size_t>(ranks));
  const std::int64_t own = 10 * rank;

  const std::unique_ptr<CommRequest> all_reduce =
      world().all_reduce_async(first.data(), 40, CommDataType::f32, ReduceOperation::sum);
  const std::unique_ptr<CommRequest> reduce_scatter =
      world().reduce_scatter_async(input.data(), second.data(), counts, CommDataType::bf16, ReduceOperation::average);
  const std::unique_ptr<CommRequest> all_gather = world().all_gather_async(
      &own, gathered.data(), std::vector<std::size_t>(static_cast<std::size_t>(ranks), 1), CommDataType::i64);
  while (!all_gather->test()) {
  }
  reduce_scatter->wait();
  all_reduce->wait();
  const std::vector<double> sums = doubles_of(first, CommDataType::f32);
  for (std::size_t k = 0; k < 40; ++k) ASSERT_EQ(sums[k], reduced(k, ranks, ReduceOperation::sum)) << k;
  const std::vector<double> averages = doubles_of(second, CommDataType::bf16);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(averages[i], reduced(3 * static_cast<std::size_t>(rank) + i, ranks, ReduceOperation::average)) << i;
  }
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(gathered[static_cast<std::size_t>(r)], 10 * r);
}

// The all_reduce runs on a group, the barrier on the world: collectives on one communicator must start
// in the same order on every rank, on different ones they need not.
TEST(CommMpiAsync, ARequestIsIncompleteUntilEveryRankStarted) {
  const std::unique_ptr<Communicator> group = world().split(0, world().rank());
  std::int64_t value = world().rank() + 1;
  if (world().rank() == 0) {
    const std::unique_ptr<CommRequest> request =
        group->all_reduce_async(&value, 1, CommDataType::i64, ReduceOperation::sum);
    EXPECT_FALSE(request->test());  // the others start theirs after the barrier
    world().barrier();
    request->wait();
  } else {
    world().barrier();
    group->all_reduce(&value, 1, CommDataType::i64, ReduceOperation::sum);
  }
  EXPECT_EQ(value, world().size() * (world().size() + 1) / 2);
}

// In pairs, one combine per element, so its rounding is known: bf16 256 + 1 = 257 -> 256 and
// 256 + 3 = 259 -> 260 (ties to even); f16 2048 + 1 -> 2048, 2048 + 3 -> 2052. Averages divide the
// rounded sum: (256 + 3) / 2 -> 260 / 2 = 130.
TEST(CommMpiAsync, HalfPrecisionRoundsOncePerCombine) {
  const std::unique_ptr<Communicator> pair = world().split(world().rank() / 2, world().rank());
  const bool first = pair->rank() == 0;
  struct Case {
    CommDataType type;
    double large;
    std::vector<double> sums;
  };
  for (const Case& tested : {Case{CommDataType::bf16, 256, {256, 260, 1.5}}, Case{CommDataType::f16, 2048, {2048, 2052, 1.5}}}) {
    const std::vector<double> own = first ? std::vector<double>{tested.large, tested.large, -2}
                                          : std::vector<double>{1, 3, 3.5};
    std::vector<std::byte> sums = values_of(own, tested.type);
    pair->all_reduce(sums.data(), 3, tested.type, ReduceOperation::sum);
    EXPECT_EQ(doubles_of(sums, tested.type), tested.sums) << comm_data_type_name(tested.type);
    std::vector<std::byte> averages = values_of(own, tested.type);
    pair->all_reduce(averages.data(), 3, tested.type, ReduceOperation::average);
    EXPECT_EQ(doubles_of(averages, tested.type),
              (std::vector<double>{tested.sums[0] / 2, tested.sums[1] / 2, 0.75}))
        << comm_data_type_name(tested.type);
    std::vector<std::byte> maxima = values_of(own, tested.type);
    pair->all_reduce(maxima.data(), 3, tested.type, ReduceOperation::max);
    EXPECT_EQ(doubles_of(maxima, tested.type), (std::vector<double>{tested.large, tested.large, 3.5}));
  }
}

// Each collective's bytes by the ring figures, on a fresh group (its count starts at zero).
TEST(CommMpiTraffic, BytesSentFollowTheRingFigures) {
  const std::unique_ptr<Communicator> group = world().split(0, world().rank());
  const int rank = group->rank();
  const bool four = group->size() == 4;
  EXPECT_EQ(group->bytes_sent(), 0U);
  std::uint64_t expected = 0;
  auto check = [&](std::uint64_t added, const char* what) {
    expected += added;
    EXPECT_EQ(group->bytes_sent(), expected) << what;
  };
  std::vector<float> floats(100, 1.0F);
  group->all_reduce(floats.data(), 100, CommDataType::f32, ReduceOperation::sum);
  check(four ? 600 : 400, "all_reduce of 400 bytes: 2 n (p - 1) / p");
  std::vector<std::byte> halves = values_of({1, 2, 3}, CommDataType::bf16);
  group->all_reduce_async(halves.data(), 3, CommDataType::bf16, ReduceOperation::average)->wait();
  check(four ? 9 : 6, "all_reduce of 6 bytes: floor(36 / 4) on 4 ranks");
  const std::vector<std::size_t> counts = uneven_counts(group->size());  // {2, 0} or {2, 0, 4, 5} f64
  std::vector<double> input(total_of(counts));
  std::vector<double> output(total_of(counts));
  const std::uint64_t all_blocks = total_of(counts) * 8;  // 16 or 88 bytes
  const std::uint64_t own_block = counts[static_cast<std::size_t>(rank)] * 8;
  group->reduce_scatter(input.data(), output.data(), counts, CommDataType::f64, ReduceOperation::sum);
  check(all_blocks - own_block, "reduce_scatter: all blocks but its own");
  group->all_gather(input.data(), output.data(), counts, CommDataType::f64);
  check(all_blocks - own_block, "all_gather: all blocks but its own");
  std::vector<char> bytes(1001);
  group->broadcast(bytes.data(), bytes.size(), group->size() - 1);
  check(rank == group->size() - 1 ? 1001 : 0, "broadcast: n at the root");
  const int right = (rank + 1) % group->size();
  const int left = (rank + group->size() - 1) % group->size();
  const std::unique_ptr<CommRequest> send = group->send_async(bytes.data(), 64, right, 3);
  group->receive(bytes.data() + 100, 64, left, 3);
  send->wait();
  check(64, "send of 64 bytes (the receive adds nothing)");
  group->barrier();
  group->gather_strings(std::string(static_cast<std::size_t>(rank), 'x'), 0);
  check(rank == 0 ? 0 : static_cast<std::uint64_t>(rank), "gather_strings: the value's bytes but at the root");
  const std::vector<std::uint64_t> totals =
      four ? std::vector<std::uint64_t>{600 + 9 + 2 * 72 + 64, 600 + 9 + 2 * 88 + 64 + 1, 600 + 9 + 2 * 56 + 64 + 2,
                                        600 + 9 + 2 * 48 + 1001 + 64 + 3}
           : std::vector<std::uint64_t>{400 + 6 + 0 + 64, 400 + 6 + 2 * 16 + 1001 + 64 + 1};
  EXPECT_EQ(group->bytes_sent(), totals[static_cast<std::size_t>(rank)]);
}

// A collective that only rank 0 starts: its wait times out naming it, and the communicator (a separate
// one: MPI cannot withdraw the collective) refuses further work. The others join late, so MPI can
// finish it in the background while rank 0 waits at the world's barrier.
TEST(CommMpiAsync, ATimedOutCollectiveNamesItselfAndStopsItsCommunicator) {
  static std::vector<float> data(4, 1.0F);  // MPI may finish with it after the test
  std::unique_ptr<Communicator> separate = make_mpi_communicator(detect_rank_environment());
  separate->set_timeout(world().timeout());
  if (world().rank() == 0) {
    separate->set_timeout(200ms);
    const std::unique_ptr<CommRequest> request =
        separate->all_reduce_async(data.data(), 4, CommDataType::f32, ReduceOperation::average);
    const std::string error = error_of<CommunicationError>([&] { request->wait(); });
    EXPECT_TRUE(contains(error, "rank 0: all_reduce (average) of 4 f32 (16 bytes) over " +
                                    std::to_string(world().size()) + " ranks did not complete within 200 ms"))
        << error;
    EXPECT_TRUE(contains(error, "can no longer be used")) << error;
    EXPECT_EQ(error_of<CommunicationError>([&] { request->wait(); }), error);  // a failed request stays failed
    const std::string refused = error_of<CommunicationError>([&] { separate->barrier(); });
    EXPECT_TRUE(contains(refused, "refused: an earlier operation (rank 0: all_reduce (average)")) << refused;
  }
  world().barrier();
  if (world().rank() != 0) separate->all_reduce(data.data(), 4, CommDataType::f32, ReduceOperation::average);
  world().barrier();
}

}  // namespace
}  // namespace ferry
