// The world of one rank: collectives leave or copy the data, messages have nowhere to go and say why,
// abort ends the process with its code after flushing what was printed; make_communicator picks this
// backend without a launcher, and torchrun's rendezvous names what it lacks.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/comm/communicator.h"
#include "tests/comm/comm_test_support.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;

TEST(SingleRankCommunicator, IsRankZeroOfOne) {
  const std::unique_ptr<Communicator> communicator = make_single_rank_communicator();
  EXPECT_EQ(communicator->rank(), 0);
  EXPECT_EQ(communicator->size(), 1);
  EXPECT_EQ(communicator->local_rank(), 0);
  EXPECT_EQ(communicator->backend(), "single");
  EXPECT_EQ(communicator->timeout(), std::chrono::seconds(300));
}

TEST(SingleRankCommunicator, CollectivesKeepOrCopyTheData) {
  const std::unique_ptr<Communicator> communicator = make_single_rank_communicator();
  std::vector<double> data = {1.5, -2.0, 3.25};
  communicator->all_reduce(data.data(), data.size(), CommDataType::f64, ReduceOperation::sum);
  EXPECT_EQ(data, (std::vector<double>{1.5, -2.0, 3.25}));

  const std::vector<std::int64_t> input = {7, -8, 1LL << 40};
  std::vector<std::int64_t> output = {0, 0, 0, 99};
  communicator->reduce_scatter(input.data(), output.data(), 3, CommDataType::i64);
  EXPECT_EQ(output, (std::vector<std::int64_t>{7, -8, 1LL << 40, 99}));  // count elements, no more

  const std::vector<float> gathered_input = {0.5F, 4.0F};
  std::vector<float> gathered = {0, 0, 9};
  communicator->all_gather(gathered_input.data(), gathered.data(), 2, CommDataType::f32);
  EXPECT_EQ(gathered, (std::vector<float>{0.5F, 4.0F, 9}));
  communicator->all_gather(gathered.data(), gathered.data(), 3, CommDataType::f32);  // in place
  EXPECT_EQ(gathered, (std::vector<float>{0.5F, 4.0F, 9}));

  std::vector<char> bytes = {'a', 'b'};
  communicator->broadcast(bytes.data(), bytes.size(), 0);
  EXPECT_EQ(bytes, (std::vector<char>{'a', 'b'}));
  const std::string with_nul("x\0y", 3);
  EXPECT_EQ(communicator->gather_strings(with_nul, 0), (std::vector<std::string>{with_nul}));
  EXPECT_EQ(communicator->gather_strings("", 0), (std::vector<std::string>{""}));
  communicator->barrier();
}

TEST(SingleRankCommunicator, AsynchronousCollectivesCompleteAtOnceAndSplitGivesOneRank) {
  std::unique_ptr<Communicator> communicator = make_single_rank_communicator();
  communicator->set_timeout(std::chrono::seconds(9));
  std::vector<double> data = {1.5, -2.0};
  const std::unique_ptr<CommRequest> average =
      communicator->all_reduce_async(data.data(), 2, CommDataType::f64, ReduceOperation::average);
  EXPECT_TRUE(average->test());
  EXPECT_EQ(data, (std::vector<double>{1.5, -2.0}));  // the average over one rank is the value

  const std::vector<std::uint16_t> input = {0x3f80, 0x4000, 0x4040};  // bf16 1, 2, 3
  std::vector<std::uint16_t> output = {0, 0, 0, 7};
  const std::size_t three[] = {3};
  communicator->reduce_scatter_async(input.data(), output.data(), three, CommDataType::bf16, ReduceOperation::sum)
      ->wait();
  EXPECT_EQ(output, (std::vector<std::uint16_t>{0x3f80, 0x4000, 0x4040, 7}));
  std::vector<std::uint16_t> gathered = {0, 0, 0, 0};
  communicator->all_gather_async(input.data(), gathered.data(), three, CommDataType::f16)->wait();
  EXPECT_EQ(gathered, (std::vector<std::uint16_t>{0x3f80, 0x4000, 0x4040, 0}));
  const std::size_t two_ranks[] = {1, 1};
  const std::string error = error_of<CommunicationError>(
      [&] { communicator->all_gather(input.data(), gathered.data(), two_ranks, CommDataType::f16); });
  EXPECT_TRUE(contains(error, "all_gather on a single rank: 2 counts for a group of 1 ranks")) << error;
  EXPECT_EQ(communicator->bytes_sent(), 0U);

  const std::unique_ptr<Communicator> group = communicator->split(3, 7);
  EXPECT_EQ(group->backend(), "single");
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->timeout(), std::chrono::seconds(9));
}

TEST(SingleRankCommunicator, RootsOtherThanZeroAreErrors) {
  const std::unique_ptr<Communicator> communicator = make_single_rank_communicator();
  char byte = 0;
  const std::string error = error_of<CommunicationError>([&] { communicator->broadcast(&byte, 1, 1); });
  EXPECT_TRUE(contains(error, "root rank 1")) << error;
  EXPECT_THROW(communicator->gather_strings("value", 2), CommunicationError);
}

TEST(SingleRankCommunicator, MessagesHaveNoPeer) {
  const std::unique_ptr<Communicator> communicator = make_single_rank_communicator();
  std::int64_t value = 0;
  const std::string to_itself = error_of<CommunicationError>([&] { communicator->send(&value, sizeof value, 0, 3); });
  EXPECT_TRUE(contains(to_itself, "send of 8 bytes to rank 0 with tag 3")) << to_itself;
  EXPECT_TRUE(contains(to_itself, "to itself")) << to_itself;

  const std::string from_nobody =
      error_of<CommunicationError>([&] { communicator->receive_async(&value, sizeof value, 1, 4); });
  EXPECT_TRUE(contains(from_nobody, "receive of 8 bytes from rank 1 with tag 4")) << from_nobody;
  EXPECT_TRUE(contains(from_nobody, "no rank 1")) << from_nobody;

  EXPECT_THROW(communicator->receive(&value, sizeof value, 0, 0), CommunicationError);
  EXPECT_THROW(communicator->send_async(&value, sizeof value, 2, 0), CommunicationError);
}

TEST(SingleRankCommunicatorDeathTest, AbortFlushesOutputAndExitsWithTheCode) {
  const std::unique_ptr<Communicator> communicator = make_single_rank_communicator();
  EXPECT_EXIT(
      {
        // Fully buffered: without a flush before the exit this line would be lost.
        std::setvbuf(stderr, nullptr, _IOFBF, 1 << 16);
        std::fputs("rank 0: the error that ends the job", stderr);
        communicator->abort(3);
      },
      ::testing::ExitedWithCode(3), "the error that ends the job");
}

// Sets an environment variable for one test (each test runs in its own process under CTest).
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedVariable() { ::unsetenv(name_); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
};

void skip_under_a_launcher() {
  if (detect_rank_environment().launcher != "none") GTEST_SKIP() << "the unit tests run under a launcher";
}

TEST(MakeCommunicator, NoLauncherGivesOneRankWithTheTimeoutFromTheEnvironment) {
  skip_under_a_launcher();
  const ScopedVariable timeout(kCommTimeoutVariable, "7");
  const std::unique_ptr<Communicator> communicator = make_communicator();
  EXPECT_EQ(communicator->backend(), "single");
  EXPECT_EQ(communicator->timeout(), std::chrono::seconds(7));
}

TEST(MakeCommunicator, BadTimeoutIsRejected) {
  skip_under_a_launcher();
  const ScopedVariable timeout(kCommTimeoutVariable, "soon");
  EXPECT_THROW(make_communicator(), std::invalid_argument);
}

// torchrun's one rank is one rank; of several, the rendezvous names what it lacks before MPI starts.
TEST(MakeCommunicator, TorchrunOfOneRankIsOneRankAndOfSeveralNeedsItsMaster) {
  skip_under_a_launcher();
  const ScopedVariable rank("RANK", "0");
  const ScopedVariable world_size("WORLD_SIZE", "1");
  EXPECT_EQ(make_communicator()->backend(), "single");
  const ScopedVariable two("WORLD_SIZE", "2");
  const std::string error = error_of<CommunicationError>([] { make_communicator(); });
  EXPECT_TRUE(contains(error, "torchrun rendezvous: MASTER_ADDR is not set")) << error;
}

}  // namespace
}  // namespace ferry
