// Groups under mpirun (2 and 4 ranks): the world splits like a tp=2 x dp grid (tp fastest), each group
// has the rank and size the grid calls for and reduces over its own ranks only; keys order a group; a
// group outlives the communicator it was split from (and keeps its MPI context: the bf16 operations);
// errors name the group's world ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_communicator.h"
#include "tests/comm/comm_test_support.h"
#include "tests/comm/mpi_test_world.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::world;

constexpr int kTensorParallel = 2;

TEST(CommMpiGroups, SplitsLikeATensorByDataParallelGrid) {
  const int rank = world().rank();
  const int data_parallel = world().size() / kTensorParallel;
  // tp groups: consecutive ranks; dp groups: the ranks with the same tp index.
  const std::unique_ptr<Communicator> tensor = world().split(rank / kTensorParallel, rank);
  const std::unique_ptr<Communicator> data = world().split(rank % kTensorParallel, rank);
  EXPECT_EQ(tensor->backend(), "mpi");
  EXPECT_EQ(tensor->size(), kTensorParallel);
  EXPECT_EQ(tensor->rank(), rank % kTensorParallel);
  EXPECT_EQ(data->size(), data_parallel);
  EXPECT_EQ(data->rank(), rank / kTensorParallel);
  EXPECT_EQ(tensor->timeout(), world().timeout());

  // The sum of the world ranks in each group: tp group g holds 2g and 2g + 1; dp group t holds t, t + 2, ...
  std::int64_t tensor_sum = rank;
  std::int64_t data_sum = rank;
  tensor->all_reduce(&tensor_sum, 1, CommDataType::i64, ReduceOperation::sum);
  data->all_reduce(&data_sum, 1, CommDataType::i64, ReduceOperation::sum);
  const int group = rank / kTensorParallel;
  EXPECT_EQ(tensor_sum, 4 * group + 1);
  std::int64_t expected_data_sum = 0;
  for (int d = 0; d < data_parallel; ++d) expected_data_sum += kTensorParallel * d + rank % kTensorParallel;
  EXPECT_EQ(data_sum, expected_data_sum);
  EXPECT_EQ(data_sum, world().size() == 2 ? rank : 2 + 2 * (rank % 2));  // 4 ranks: {0, 2} -> 2, {1, 3} -> 4

  // A group's operations are its own: a broadcast in tp group g reaches only its 2 ranks.
  std::int64_t from_root = tensor->rank() == 1 ? 100 + rank : -1;
  tensor->broadcast(&from_root, sizeof from_root, 1);
  EXPECT_EQ(from_root, 100 + group * kTensorParallel + 1);
}

TEST(CommMpiGroups, KeysOrderTheGroup) {
  const std::unique_ptr<Communicator> reversed = world().split(7, -world().rank());
  EXPECT_EQ(reversed->rank(), world().size() - 1 - world().rank());
  std::vector<std::int64_t> world_ranks(static_cast<std::size_t>(world().size()));
  const std::int64_t own = world().rank();
  reversed->all_gather(&own, world_ranks.data(), 1, CommDataType::i64);
  for (int r = 0; r < world().size(); ++r) EXPECT_EQ(world_ranks[static_cast<std::size_t>(r)], world().size() - 1 - r);
  // Equal keys keep the order of the ranks here.
  const std::unique_ptr<Communicator> same_key = world().split(0, 5);
  EXPECT_EQ(same_key->rank(), world().rank());
}

TEST(CommMpiGroups, AGroupOutlivesTheCommunicatorItCameFrom) {
  std::unique_ptr<Communicator> parent = make_mpi_communicator(detect_rank_environment());
  parent->set_timeout(world().timeout());
  std::unique_ptr<Communicator> pair = parent->split(parent->rank() / 2, parent->rank());
  std::unique_ptr<Communicator> single = pair->split(pair->rank(), 0);  // a group of a group
  parent.reset();
  std::int64_t value = 1;
  pair->all_reduce(&value, 1, CommDataType::i64, ReduceOperation::sum);
  EXPECT_EQ(value, 2);
  single->all_reduce(&value, 1, CommDataType::i64, ReduceOperation::sum);
  EXPECT_EQ(value, 2);
  EXPECT_EQ(single->size(), 1);
  std::uint16_t bf16_one = 0x3f80;  // the parent's bf16 sum, still alive: 1 + 1 = 2 (0x4000)
  pair->all_reduce(&bf16_one, 1, CommDataType::bf16, ReduceOperation::sum);
  EXPECT_EQ(bf16_one, 0x4000);
  pair->barrier();
}

TEST(CommMpiGroups, ErrorsNameTheGroupAndTheWorldRank) {
  const int rank = world().rank();
  const std::unique_ptr<Communicator> pair = world().split(rank / 2, rank);
  std::int64_t value = 0;
  const std::string error = error_of<CommunicationError>([&] { pair->send(&value, sizeof value, 2, 1); });
  const int first = rank / 2 * 2;
  const std::string group = "of the group of world ranks " + std::to_string(first) + ", " + std::to_string(first + 1);
  EXPECT_TRUE(contains(error, "world rank " + std::to_string(rank) + " (rank " + std::to_string(rank % 2) + " " + group +
                                  "): send of 8 bytes to rank 2 with tag 1: there is no rank 2 in a group of 2"))
      << error;
  const std::string bad_counts = error_of<CommunicationError>([&] {
    const std::size_t counts[] = {1, 1, 1};
    pair->all_gather(&value, &value, counts, CommDataType::i64);
  });
  EXPECT_TRUE(contains(bad_counts, "all_gather of 1+1+1 i64 (24 bytes) over 2 ranks " + group)) << bad_counts;
  EXPECT_TRUE(contains(bad_counts, "3 counts for a group of 2 ranks")) << bad_counts;
  const std::string negative = error_of<CommunicationError>([&] { world().split(-1, 0); });
  EXPECT_TRUE(contains(negative, "split (color -1, key 0) over " + std::to_string(world().size()) +
                                     " ranks: a color is 0 or more"))
      << negative;
  pair->barrier();  // still usable
}

}  // namespace
}  // namespace ferry
