// RMM trace reading (errors carry line numbers) and replay (peaks, unknown frees, minimum capacity).
#include <gtest/gtest.h>

#include <sstream>

#include "allocator/trace_replay.h"
#include "allocator_test_support.h"

namespace ferry::testing {
namespace {

std::vector<RmmTraceRecord> parse(const std::string& text) {
  std::istringstream input(text);
  return read_rmm_trace(input, "trace.csv");
}

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const TraceFormatError& error) {
    return error.what();
  }
  return "";
}

TEST(RmmTrace, ReadsRmmLoggingCsv) {
  const auto records = parse(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "2342727,15:47:02.841961,allocate,0x10012400000,1048576,0\n"
      "2342727,15:47:02.841990,allocate failure,0x0,999999999999,0x7f00\n"
      "2342727,15:47:02.842001,free,0x10012400000,1048576,0\n");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].pointer, 0x10012400000u);
  EXPECT_EQ(records[0].size, 1048576u);
  EXPECT_EQ(records[0].line, 2u);
  EXPECT_EQ(records[1].action, RmmAction::allocate_failure);
  EXPECT_EQ(records[1].stream, 0x7f00u);
  EXPECT_EQ(records[2].action, RmmAction::free);
  std::ostringstream written;
  write_rmm_trace(written, records);
  const auto again = parse(written.str());
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[2].pointer, records[2].pointer);
}

TEST(RmmTrace, MalformedLinesNameTheirLine) {
  EXPECT_NE(error_of("").find("trace.csv:1"), std::string::npos);
  EXPECT_NE(error_of("Pointer,Size\n").find("header"), std::string::npos);
  const std::string header = "Thread,Time,Action,Pointer,Size,Stream\n";
  EXPECT_NE(error_of(header + "1,t,allocate,0x10,512,0\n1,t,grab,0x10,512,0\n").find("trace.csv:3: unknown action 'grab'"),
            std::string::npos);
  EXPECT_NE(error_of(header + "1,t,allocate,0x10,big,0\n").find("trace.csv:2: bad size 'big'"), std::string::npos);
  EXPECT_NE(error_of(header + "1,t,allocate,0x10,512\n").find("trace.csv:2: expected 6"), std::string::npos);
  EXPECT_NE(error_of(header + "1,t,allocate,zz,512,0\n").find("bad pointer"), std::string::npos);
}

TEST(TraceReplay, ReportsPeaksAndUnknownFrees) {
  const auto records = parse(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,t,allocate,0x1000,3000000,0\n"
      "1,t,allocate,0x2000,1000,0\n"
      "1,t,free,0x1000,3000000,0\n"
      "1,t,free,0x9999,10,0\n"
      "1,t,allocate,0x3000,5000000,0\n"
      "1,t,free,0x2000,1000,0\n"
      "1,t,free,0x3000,5000000,0\n");
  const ReplayResult result = replay_trace(records, kUnlimitedReplayCapacity, AllocatorConfig{});
  EXPECT_TRUE(result.completed());
  EXPECT_EQ(result.peak_requested, 5001000u);
  EXPECT_EQ(result.peak_allocated, 5000192u + 1024u);  // 5000000 rounds to 5000192
  EXPECT_EQ(result.peak_reserved, 22 * kMiB);            // a 20 MiB and a 2 MiB segment
  EXPECT_EQ(result.unknown_frees, 1u);
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_NE(result.problems[0].find("line 5: free of unknown pointer 0x9999"), std::string::npos);
  // Allocated peaks at the 5 MB request: 22 MiB reserved for 5001000 requested bytes; the free
  // bytes then are the 20 MiB segment's 15 MiB tail and the 2 MiB segment's 2 MiB - 1 KiB.
  EXPECT_NEAR(result.fragmentation_at_peak, 1.0 - 5001000.0 / (22.0 * kMiB), 1e-12);
  const double tail = 20.0 * kMiB - 5000192.0;
  EXPECT_NEAR(result.largest_free_fraction_at_peak, tail / (tail + 2.0 * kMiB - 1024.0), 1e-12);
}

TEST(TraceReplay, OutOfMemoryIsCountedAndMinimumCapacityIsFound) {
  std::ostringstream text;
  text << "Thread,Time,Action,Pointer,Size,Stream\n";
  for (int i = 0; i < 8; ++i) text << "1,t,allocate,0x" << std::hex << (0x1000 + i) << std::dec << "," << (6 + i) * kMiB << ",0\n";
  for (int i = 0; i < 8; ++i) text << "1,t,free,0x" << std::hex << (0x1000 + i) << std::dec << "," << (6 + i) * kMiB << ",0\n";
  const auto records = parse(text.str());
  const ReplayResult tight = replay_trace(records, 40 * kMiB, AllocatorConfig{});
  EXPECT_FALSE(tight.completed());
  EXPECT_GT(tight.num_ooms, 0);
  const std::size_t minimum = find_min_capacity(records, AllocatorConfig{});
  EXPECT_EQ(minimum % kMiB, 0u);
  EXPECT_TRUE(replay_trace(records, minimum, AllocatorConfig{}).completed());
  EXPECT_FALSE(replay_trace(records, minimum - kMiB, AllocatorConfig{}).completed());
  EXPECT_GE(minimum, tight.peak_requested);
}

}  // namespace
}  // namespace ferry::testing
