// The dry-run communicator: the rank and size it was given, collectives and messages that complete at
// once and leave every buffer as it was, bytes_sent as if the data had moved (exact ring figures),
// argument checks as a real backend's, and no split.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/comm/communicator.h"
#include "tests/comm/comm_test_support.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;

TEST(DryRunCommunicator, IsTheRankItWasGiven) {
  const std::unique_ptr<Communicator> communicator = make_dry_run_communicator(2, 4);
  EXPECT_EQ(communicator->rank(), 2);
  EXPECT_EQ(communicator->size(), 4);
  EXPECT_EQ(communicator->backend(), "dry-run");
  EXPECT_EQ(communicator->bytes_sent(), 0U);
  EXPECT_THROW(make_dry_run_communicator(4, 4), std::invalid_argument);
  EXPECT_THROW(make_dry_run_communicator(-1, 4), std::invalid_argument);
  EXPECT_THROW(make_dry_run_communicator(0, 0), std::invalid_argument);
}

TEST(DryRunCommunicator, MovesNothingAndCountsTheRingFigures) {
  const std::unique_ptr<Communicator> communicator = make_dry_run_communicator(2, 4);
  std::vector<float> data = {1, 2, 3, 4, 5};
  const std::unique_ptr<CommRequest> request =
      communicator->all_reduce_async(data.data(), 5, CommDataType::f32, ReduceOperation::average);
  EXPECT_TRUE(request->test());
  request->wait();
  EXPECT_EQ(data, (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(communicator->bytes_sent(), 30U);  // floor(2 * 20 * 3 / 4)

  const std::vector<std::size_t> counts = {2, 0, 4, 5};  // 11 f64, rank 2's own block: 4
  const std::vector<double> input(11, 1.0);
  std::vector<double> output(11, -1.0);
  communicator->reduce_scatter(input.data(), output.data(), counts, CommDataType::f64, ReduceOperation::sum);
  EXPECT_EQ(communicator->bytes_sent(), 30U + 56U);
  communicator->all_gather(input.data(), output.data(), counts, CommDataType::bf16);
  EXPECT_EQ(communicator->bytes_sent(), 30U + 56U + 14U);
  EXPECT_EQ(output, std::vector<double>(11, -1.0));
  communicator->reduce_scatter(input.data(), output.data(), 3, CommDataType::i64);  // equal counts: 12 elements
  EXPECT_EQ(communicator->bytes_sent(), 30U + 56U + 14U + 72U);

  std::vector<char> bytes = {'a', 'b', 'c'};
  communicator->broadcast(bytes.data(), 3, 0);  // not the root: nothing sent
  communicator->broadcast(bytes.data(), 3, 2);
  communicator->send(bytes.data(), 3, 0, 5);
  communicator->receive(bytes.data(), 3, 3, 5);
  communicator->barrier();
  EXPECT_EQ(bytes, (std::vector<char>{'a', 'b', 'c'}));
  EXPECT_EQ(communicator->bytes_sent(), 30U + 56U + 14U + 72U + 3U + 3U);
  EXPECT_TRUE(communicator->gather_strings("xy", 1).empty());
  EXPECT_EQ(communicator->gather_strings("xy", 2), (std::vector<std::string>{"", "", "xy", ""}));
  EXPECT_EQ(communicator->bytes_sent(), 30U + 56U + 14U + 72U + 3U + 3U + 2U);
}

TEST(DryRunCommunicator, ChecksArgumentsAndCannotSplit) {
  const std::unique_ptr<Communicator> communicator = make_dry_run_communicator(1, 2);
  std::int64_t value = 0;
  const std::size_t three[] = {1, 1, 1};
  const std::string counts = error_of<CommunicationError>(
      [&] { communicator->all_gather_async(&value, &value, three, CommDataType::i64); });
  EXPECT_TRUE(contains(counts, "dry-run rank 1 of 2: all_gather of 1+1+1 i64 (24 bytes): 3 counts for a group of 2"))
      << counts;
  EXPECT_TRUE(contains(error_of<CommunicationError>([&] { communicator->send(&value, 8, 1, 0); }), "to itself"));
  EXPECT_TRUE(contains(error_of<CommunicationError>([&] { communicator->receive(&value, 8, 2, 0); }), "no rank 2"));
  EXPECT_THROW(communicator->broadcast(&value, 8, 2), CommunicationError);
  EXPECT_EQ(communicator->bytes_sent(), 0U);
  EXPECT_EQ(error_of<std::logic_error>([&] { communicator->split(0, 0); }),
            "a dry-run communicator cannot split: build its groups with make_dry_run_communicator");
}

TEST(DryRunCommunicatorDeathTest, AbortEndsTheProcessWithTheCode) {
  const std::unique_ptr<Communicator> communicator = make_dry_run_communicator(0, 8);
  EXPECT_EXIT(communicator->abort(4), ::testing::ExitedWithCode(4), "");
}

}  // namespace
}  // namespace ferry
