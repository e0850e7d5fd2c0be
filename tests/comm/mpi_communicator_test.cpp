// The MPI communicator under mpirun with 2 and 4 ranks (tests/CMakeLists.txt): collectives give known
// values, messages keep their order per tag, large sends in both directions do not deadlock, small
// chunks give the same results as whole messages, and a silent peer, a short or a long message give
// errors that name the peer and the tag. Every rank runs every test in the same order.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_communicator.h"
#include "tests/comm/comm_test_support.h"
#include "tests/comm/mpi_test_world.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using namespace std::chrono_literals;

using testing::world;

// Element k of rank r's buffer: (r + 1) times a base value of either sign, some of them beyond 2^32.
double base_value(std::size_t k) {
  const double magnitude = static_cast<double>(k % 13 + 1) * (k % 5 == 4 ? 1099511627776.0 : 1.0);  // 2^40
  return k % 2 == 0 ? magnitude : -magnitude;
}
template <typename Value>
Value contribution(int rank, std::size_t k) {
  return static_cast<Value>(static_cast<double>(rank + 1) * base_value(k));
}

template <typename Value>
void check_all_reduce(Communicator& communicator, CommDataType type, std::size_t count) {
  const int ranks = communicator.size();
  std::vector<Value> sums(count);
  std::vector<Value> maxima(count);
  for (std::size_t k = 0; k < count; ++k) sums[k] = maxima[k] = contribution<Value>(communicator.rank(), k);
  communicator.all_reduce(sums.data(), count, type, ReduceOperation::sum);
  communicator.all_reduce(maxima.data(), count, type, ReduceOperation::max);
  const double rank_sum = ranks * (ranks + 1) / 2.0;  // 1 + 2 + ... + n
  for (std::size_t k = 0; k < count; ++k) {
    ASSERT_EQ(sums[k], static_cast<Value>(rank_sum * base_value(k))) << comm_data_type_name(type) << " element " << k;
    const double largest_factor = base_value(k) > 0 ? ranks : 1;  // rank 0 holds the largest negative value
    ASSERT_EQ(maxima[k], static_cast<Value>(largest_factor * base_value(k))) << comm_data_type_name(type) << " " << k;
  }
}

template <typename Value>
void check_reduce_scatter(Communicator& communicator, CommDataType type, std::size_t count) {
  const auto ranks = static_cast<std::size_t>(communicator.size());
  std::vector<Value> input(count * ranks);
  for (std::size_t k = 0; k < input.size(); ++k) input[k] = contribution<Value>(communicator.rank(), k);
  std::vector<Value> output(count + 1, Value{42});
  communicator.reduce_scatter(input.data(), output.data(), count, type);
  const double rank_sum = static_cast<double>(ranks * (ranks + 1) / 2);
  const std::size_t first = static_cast<std::size_t>(communicator.rank()) * count;
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(output[i], static_cast<Value>(rank_sum * base_value(first + i))) << comm_data_type_name(type) << " " << i;
  }
  EXPECT_EQ(output[count], Value{42}) << "reduce_scatter wrote past its block";
}

template <typename Value>
void check_all_gather(Communicator& communicator, CommDataType type, std::size_t count) {
  const auto ranks = static_cast<std::size_t>(communicator.size());
  const auto rank = static_cast<std::size_t>(communicator.rank());
  std::vector<Value> input(count);
  for (std::size_t k = 0; k < count; ++k) input[k] = contribution<Value>(communicator.rank(), k);
  std::vector<Value> output(count * ranks);
  communicator.all_gather(input.data(), output.data(), count, type);
  std::vector<Value> in_place(count * ranks);
  std::copy(input.begin(), input.end(), in_place.begin() + static_cast<std::ptrdiff_t>(rank * count));
  communicator.all_gather(in_place.data() + rank * count, in_place.data(), count, type);
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t k = 0; k < count; ++k) {
      ASSERT_EQ(output[r * count + k], contribution<Value>(static_cast<int>(r), k)) << "rank " << r << " element " << k;
      ASSERT_EQ(in_place[r * count + k], contribution<Value>(static_cast<int>(r), k)) << "in place, rank " << r;
    }
  }
}

std::vector<unsigned char> pattern(std::size_t bytes, int seed) {
  std::vector<unsigned char> data(bytes);
  const auto offset = static_cast<std::size_t>(seed) * 31 + 3;
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>((i * 7 + offset) % 251);
  return data;
}

void check_broadcast(Communicator& communicator, std::size_t bytes) {
  const int root = communicator.size() - 1;
  std::vector<unsigned char> data(bytes);
  if (communicator.rank() == root) data = pattern(bytes, root);
  communicator.broadcast(data.data(), bytes, root);
  EXPECT_EQ(data, pattern(bytes, root));
}

// Each rank sends to its right: one message with tag 9, then five with tag 7 that must arrive in order.
void check_ring(Communicator& communicator, std::size_t bytes) {
  const int ranks = communicator.size();
  const int right = (communicator.rank() + 1) % ranks;
  const int left = (communicator.rank() + ranks - 1) % ranks;
  std::vector<std::vector<unsigned char>> outgoing;
  outgoing.push_back(pattern(bytes, 900 + communicator.rank()));
  for (int k = 0; k < 5; ++k) outgoing.push_back(pattern(bytes, communicator.rank() * 10 + k));
  std::vector<std::unique_ptr<CommRequest>> sends;
  sends.push_back(communicator.send_async(outgoing[0].data(), bytes, right, 9));
  for (int k = 1; k <= 5; ++k) sends.push_back(communicator.send_async(outgoing[k].data(), bytes, right, 7));

  std::vector<unsigned char> incoming(bytes);
  for (int k = 0; k < 5; ++k) {
    communicator.receive(incoming.data(), bytes, left, 7);
    ASSERT_EQ(incoming, pattern(bytes, left * 10 + k)) << "message " << k << " with tag 7 from rank " << left;
  }
  communicator.receive(incoming.data(), bytes, left, 9);
  EXPECT_EQ(incoming, pattern(bytes, 900 + left));
  for (const std::unique_ptr<CommRequest>& send : sends) send->wait();
}

TEST(CommMpi, RankAndSizeMatchOpenMpi) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ASSERT_TRUE(rank != nullptr && size != nullptr && local_rank != nullptr) << "run this under Open MPI's mpirun";
  EXPECT_EQ(world().backend(), "mpi");
  EXPECT_EQ(world().rank(), std::atoi(rank));
  EXPECT_EQ(world().size(), std::atoi(size));
  EXPECT_EQ(world().local_rank(), std::atoi(local_rank));
  EXPECT_GE(world().size(), 2);
}

TEST(CommMpi, AllReduceSumAndMax) {
  check_all_reduce<float>(world(), CommDataType::f32, 20);
  check_all_reduce<double>(world(), CommDataType::f64, 20);
  check_all_reduce<std::int64_t>(world(), CommDataType::i64, 20);
  std::int64_t rank_plus_one = world().rank() + 1;
  world().all_reduce(&rank_plus_one, 1, CommDataType::i64, ReduceOperation::sum);
  EXPECT_EQ(rank_plus_one, world().size() * (world().size() + 1) / 2);
}

TEST(CommMpi, ReduceScatterKeepsEachRanksBlockOfTheSum) {
  check_reduce_scatter<float>(world(), CommDataType::f32, 5);
  check_reduce_scatter<double>(world(), CommDataType::f64, 5);
  check_reduce_scatter<std::int64_t>(world(), CommDataType::i64, 5);
}

TEST(CommMpi, AllGatherPlacesEachRankAtItsOffset) {
  check_all_gather<double>(world(), CommDataType::f64, 3);
  check_all_gather<std::int64_t>(world(), CommDataType::i64, 1);
}

TEST(CommMpi, BroadcastFromTheLastRank) { check_broadcast(world(), 1001); }

std::string string_of_rank(int rank) {
  if (rank == 0) return "";
  return std::string(static_cast<std::size_t>(rank) * 3, static_cast<char>('a' + rank)) + std::string("\0x", 2);
}

TEST(CommMpi, GatherStringsOfDifferentLengths) {
  for (const int root : {world().size() - 1, 0}) {
    const std::vector<std::string> gathered = world().gather_strings(string_of_rank(world().rank()), root);
    if (world().rank() != root) {
      EXPECT_TRUE(gathered.empty());
      continue;
    }
    ASSERT_EQ(gathered.size(), static_cast<std::size_t>(world().size()));
    for (int rank = 0; rank < world().size(); ++rank) {
      EXPECT_EQ(gathered[static_cast<std::size_t>(rank)], string_of_rank(rank)) << "root " << root;
    }
  }
}

TEST(CommMpi, RingMessagesKeepTheirOrderPerTag) { check_ring(world(), 64); }

// 8 MiB is past Open MPI's eager limit: a send waits for its receive. Both neighbours send before they
// receive, so blocking sends would deadlock.
// 8 MiB (past MPI's eager sizes) to each neighbour on the ring and back: the rank's two outgoing
// messages and buffers for the two incoming ones, and the check of what arrived.
struct TwoWayMessages {
  static constexpr std::size_t kBytes = std::size_t{8} << 20;
  int right = (world().rank() + 1) % world().size();
  int left = (world().rank() + world().size() - 1) % world().size();
  std::vector<unsigned char> to_right = pattern(kBytes, world().rank() * 2);
  std::vector<unsigned char> to_left = pattern(kBytes, world().rank() * 2 + 1);
  std::vector<unsigned char> from_left = std::vector<unsigned char>(kBytes);
  std::vector<unsigned char> from_right = std::vector<unsigned char>(kBytes);
  void expect_arrived() const {
    EXPECT_TRUE(from_left == pattern(kBytes, left * 2)) << "the message from the left differs";
    EXPECT_TRUE(from_right == pattern(kBytes, right * 2 + 1)) << "the message from the right differs";
  }
};

TEST(CommMpi, LargeSendsInBothDirectionsOverlap) {
  TwoWayMessages m;
  constexpr std::size_t kBytes = TwoWayMessages::kBytes;
  std::unique_ptr<CommRequest> send_right = world().send_async(m.to_right.data(), kBytes, m.right, 21);
  std::unique_ptr<CommRequest> send_left = world().send_async(m.to_left.data(), kBytes, m.left, 22);
  std::unique_ptr<CommRequest> receive_left = world().receive_async(m.from_left.data(), kBytes, m.left, 21);
  std::unique_ptr<CommRequest> receive_right = world().receive_async(m.from_right.data(), kBytes, m.right, 22);
  for (CommRequest* request : {send_right.get(), send_left.get(), receive_left.get(), receive_right.get()}) {
    request->wait();
    EXPECT_TRUE(request->test());
  }
  m.expect_arrived();
}

TEST(CommMpi, AnExchangeCompletesWhenEveryMessageHas) {
  // Each rank sends right and left first, then receives, in one exchange; its request completes with all four.
  TwoWayMessages m;
  constexpr std::size_t kBytes = TwoWayMessages::kBytes;
  using Kind = PointToPoint::Kind;
  const PointToPoint messages[] = {{Kind::send, m.to_right.data(), nullptr, kBytes, m.right, 31},
                                   {Kind::send, m.to_left.data(), nullptr, kBytes, m.left, 32},
                                   {Kind::receive, nullptr, m.from_left.data(), kBytes, m.left, 31},
                                   {Kind::receive, nullptr, m.from_right.data(), kBytes, m.right, 32}};
  const std::uint64_t before = world().bytes_sent();
  world().exchange_async(messages)->wait();
  m.expect_arrived();
  EXPECT_EQ(world().bytes_sent() - before, 2 * kBytes);
}

TEST(CommMpi, RequestCompletesOnlyWhenTheMessageArrives) {
  std::int64_t value = 0;
  if (world().rank() == 0) {
    std::unique_ptr<CommRequest> request = world().receive_async(&value, sizeof value, 1, 31);
    EXPECT_FALSE(request->test());  // rank 1 sends after the barrier
    world().barrier();
    request->wait();
    EXPECT_EQ(value, 4242);
  } else {
    world().barrier();
    if (world().rank() == 1) world().send(&(value = 4242), sizeof value, 0, 31);
  }
}

TEST(CommMpi, DestroyingAPendingReceiveWaitsForIt) {
  std::int64_t value = 0;
  if (world().rank() == 0) {
    {
      const std::unique_ptr<CommRequest> request = world().receive_async(&value, sizeof value, 1, 32);
      world().barrier();
    }
    EXPECT_EQ(value, 77);
  } else {
    world().barrier();
    if (world().rank() == 1) world().send(&(value = 77), sizeof value, 0, 32);
  }
}

// The same collectives and messages in chunks of 24 bytes (3 doubles): hundreds of MPI calls each.
// The communicator joins the running MPI and leaves it running when it is destroyed.
TEST(CommMpi, SmallChunksGiveTheSameResults) {
  std::unique_ptr<Communicator> chunked =
      make_mpi_communicator(detect_rank_environment(), MpiCommunicatorOptions{.max_message_chunk_bytes = 24});
  chunked->set_timeout(world().timeout());
  check_all_reduce<double>(*chunked, CommDataType::f64, 1000);
  check_all_reduce<float>(*chunked, CommDataType::f32, 100);
  check_reduce_scatter<std::int64_t>(*chunked, CommDataType::i64, 50);
  check_all_gather<double>(*chunked, CommDataType::f64, 50);
  check_broadcast(*chunked, 1001);
  check_ring(*chunked, 1001);
  check_ring(*chunked, 0);
  chunked.reset();
  world().barrier();  // MPI still runs
}

// The message of the CommunicationError that `operation` throws.
template <typename Operation>
std::string communication_error(Operation&& operation) {
  return error_of<CommunicationError>(std::forward<Operation>(operation));
}

TEST(CommMpi, ReceiveFromASilentPeerTimesOutAndIsWithdrawn) {
  std::int64_t abandoned = -1;
  if (world().rank() == 0) {
    const std::chrono::milliseconds saved = world().timeout();
    world().set_timeout(200ms);
    const auto start = std::chrono::steady_clock::now();
    const std::string error = communication_error([&] { world().receive(&abandoned, sizeof abandoned, 1, 4242); });
    const auto waited = std::chrono::steady_clock::now() - start;
    world().set_timeout(saved);
    for (const char* part :
         {"rank 0: receive of 8 bytes from rank 1 with tag 4242", "200 ms", "FERRY_COMM_TIMEOUT_SECONDS"}) {
      EXPECT_TRUE(contains(error, part)) << "'" << part << "' missing from: " << error;
    }
    EXPECT_GE(waited, 200ms);
    EXPECT_LT(waited, 10s);
  }
  world().barrier();
  // The withdrawn receive takes nothing: the next message with that tag goes to the next receive.
  std::int64_t value = 0;
  if (world().rank() == 1) world().send(&(value = 99), sizeof value, 0, 4242);
  if (world().rank() == 0) {
    world().receive(&value, sizeof value, 1, 4242);
    EXPECT_EQ(value, 99);
    EXPECT_EQ(abandoned, -1);
  }
  world().barrier();
}

TEST(CommMpi, MessagesOfTheWrongSizeAreErrors) {
  const std::vector<unsigned char> hundred = pattern(100, 1);
  if (world().rank() == 1) {
    world().send(hundred.data(), 100, 0, 51);
    world().send(hundred.data(), 50, 0, 52);
  }
  if (world().rank() == 0) {
    std::vector<unsigned char> buffer(100);
    const std::string too_long = communication_error([&] { world().receive(buffer.data(), 64, 1, 51); });
    EXPECT_TRUE(contains(too_long, "from rank 1 with tag 51")) << too_long;
    EXPECT_TRUE(contains(too_long, "larger than the 64 bytes expected (MPI_ERR_TRUNCATE)")) << too_long;
    const std::string too_short = communication_error([&] { world().receive(buffer.data(), 100, 1, 52); });
    EXPECT_TRUE(contains(too_short, "has 50 bytes, 100 bytes expected")) << too_short;
  }
  world().barrier();
}

// A rendezvous send to a peer that does not receive in time cannot be withdrawn: its communicator
// refuses every later operation and, when destroyed, frees nothing MPI might still use.
TEST(CommMpi, ATimedOutSendMakesItsCommunicatorRefuseEverything) {
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  const std::vector<unsigned char> message = pattern(kBytes, 5);
  std::unique_ptr<Communicator> separate = make_mpi_communicator(detect_rank_environment());
  if (world().rank() == 0) {
    separate->set_timeout(200ms);
    const std::string error = communication_error([&] { separate->send(message.data(), kBytes, 1, 61); });
    EXPECT_TRUE(contains(error, "rank 0: send of 8388608 bytes to rank 1 with tag 61 did not complete")) << error;
    EXPECT_TRUE(contains(error, "can no longer be used")) << error;
    const std::string refused = communication_error([&] { separate->barrier(); });
    EXPECT_TRUE(contains(refused, "barrier over")) << refused;
    EXPECT_TRUE(contains(refused, "refused: an earlier operation (rank 0: send of 8388608 bytes")) << refused;
  }
  world().barrier();
  if (world().rank() == 1) {  // the late receive lets rank 0's send finish while rank 0 waits below
    std::vector<unsigned char> received(kBytes);
    separate->receive(received.data(), kBytes, 0, 61);
    EXPECT_TRUE(received == message);
  }
  world().barrier();
}

TEST(CommMpi, MpiDisagreeingWithTheLauncherIsAnError) {
  RankEnvironment claimed = detect_rank_environment();
  claimed.world_size += 1;
  const std::string error = communication_error([&] { make_mpi_communicator(claimed); });
  EXPECT_TRUE(contains(error, "MPI says this is rank " + std::to_string(world().rank()) + " of " +
                                  std::to_string(world().size()) + " but the mpirun environment says"))
      << error;
  EXPECT_THROW(make_mpi_communicator(claimed, MpiCommunicatorOptions{.max_message_chunk_bytes = 0}),
               std::invalid_argument);
  world().barrier();  // MPI still runs
}

TEST(CommMpi, BadPeersRootsAndThreadsAreRefused) {
  std::int64_t value = 0;
  EXPECT_TRUE(contains(communication_error([&] { world().send(&value, 8, world().rank(), 1); }), "to itself"));
  EXPECT_TRUE(contains(communication_error([&] { world().receive(&value, 8, world().size(), 1); }), "no rank"));
  EXPECT_TRUE(contains(communication_error([&] { world().send(&value, 8, (world().rank() + 1) % 2, -1); }), "tags"));
  EXPECT_TRUE(contains(communication_error([&] { world().broadcast(&value, 8, -1); }), "root rank -1"));
  std::string from_another_thread;
  std::thread([&] { from_another_thread = communication_error([&] { world().barrier(); }); }).join();
  EXPECT_TRUE(contains(from_another_thread, "MPI_THREAD_FUNNELED")) << from_another_thread;
  world().barrier();  // still usable
}

}  // namespace
}  // namespace ferry
