// The validator catches broken schedules, each problem naming the rank, the action and the rule: a missing
// backward, a backward before its forward, a send without its receive, orders that deadlock (with buffered
// sends, or only with rendezvous sends), a stage on the wrong rank, and more.
#include <gtest/gtest.h>

#include "schedule/pipeline_validator.h"

namespace ferry {
namespace {

// The problems of `text` (a schedule in the text form), one per line.
std::string problems_of(std::string_view text, std::optional<SendSemantics> semantics = std::nullopt) {
  const PipelineSchedule schedule = parse_pipeline_schedule(text);
  const ScheduleValidation validation =
      semantics ? validate_pipeline_schedule(schedule, *semantics) : validate_pipeline_schedule(schedule);
  std::string lines;
  for (const std::string& problem : validation.problems) lines += problem + "\n";
  return lines;
}

void expect_problem(std::string_view text, std::string_view expected, std::optional<SendSemantics> semantics = std::nullopt) {
  const std::string problems = problems_of(text, semantics);
  EXPECT_NE(problems.find(expected), std::string::npos) << "expected '" << expected << "' among:\n" << problems;
}

constexpr std::string_view kValid =
    "rank 0: 0F0 0F1 - 0B0 0B1\n"
    "rank 1: - 1F0 1B0 1F1 1B1\n";

TEST(PipelineValidator, AcceptsAValidSchedule) { EXPECT_EQ(problems_of(kValid), ""); }

TEST(PipelineValidator, CatchesAMissingBackward) {
  expect_problem("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1\n",
                 "stage 1 (rank 1) has no 1B1 (or 1I1 and 1W1): each stage runs one backward per micro-batch");
  expect_problem("rank 0: 0F0 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n", "stage 0 (rank 0) has no 0F1");
}

TEST(PipelineValidator, CatchesABackwardBeforeItsForward) {
  expect_problem("rank 0: 0F0 0B1 0F1 0B0\nrank 1: 1F0 1B0 1F1 1B1\n",
                 "rank 0: 0B1 comes before 0F1: a stage's backward follows its forward");
}

TEST(PipelineValidator, CatchesAStageOnTheWrongRank) {
  expect_problem("rank 0: 0F0 1F0 1B0 0B0\nrank 1:\n", "rank 0: 1F0 runs stage 1, which lives on rank 1 (stage s on rank s % 2)");
}

TEST(PipelineValidator, CatchesOutOfRangeRepeatedAndMixedActions) {
  expect_problem("# ferry pipeline schedule: name=custom ranks=2 stages=2 micro_batches=1\n"
                 "rank 0: 0F0 0F1 0B0\nrank 1: 1F0 1B0\n",
                 "rank 0: 0F1 names micro-batch 1, but the schedule has micro-batches 0..0");
  expect_problem("rank 0: 0F0 0F0 0B0\nrank 1: 1F0 1B0\n", "rank 0: 0F0 appears again (first on rank 0 at position 0)");
  expect_problem("rank 0: 0F0 0B0\nrank 1: 1F0 1I0 1W0 1B0\n", "stage 1 (rank 1) runs 1B0 and 1I0");
  expect_problem("rank 0: 0F0 0B0\nrank 1: 1F0 1W0 1I0\n", "rank 1: 1W0 comes before 1I0: a W follows its I");
  expect_problem("rank 0: 0F0 0B0\nrank 1: 1F0 1I0\n", "stage 1 (rank 1) runs 1I0 but no 1W0");
  expect_problem("rank 0: 0F0 0SEND_B0 0B0\nrank 1: 1F0 1B0\n", "rank 0: 0SEND_B0 talks to stage -1, past the pipeline's ends");
}

TEST(PipelineValidator, CatchesASendWithoutItsReceive) {
  expect_problem("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1F0 1B0 1SEND_B0\n",
                 "rank 0: 0SEND_F0 has no matching 1RECV_F0 on rank 1: every send needs one receive");
  expect_problem("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1F0 1B0 1SEND_B0\n",
                 "rank 1: 1F0 needs 1RECV_F0 before it (its input comes from stage 0 on rank 0)");
  expect_problem("rank 0: 0F0 0SEND_F0 0B0 0RECV_B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n",
                 "rank 0: 0B0 needs 0RECV_B0 before it (its input comes from stage 1), but it comes after");
}

TEST(PipelineValidator, CatchesSendsAndReceivesInDifferentOrders) {
  expect_problem("rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
                 "rank 1: 1RECV_F1 1RECV_F0 1F0 1B0 1SEND_B0 1F1 1B1 1SEND_B1\n",
                 "rank 1: 1RECV_F1 is posted where rank 0 sends 0SEND_F0: sends and receives between two ranks must come in the same order");
}

TEST(PipelineValidator, ReportsADeadlockingOrderAsNotProgressing) {
  // Each check alone passes: every F precedes its B on the stage. Rank 0 waits for 1B0 before its 0F1,
  // rank 1 for 0F1 before its 1F0.
  const std::string_view deadlock = "rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0\n";
  expect_problem(deadlock, "rank 0 waits at 0B0 for 1B0 on rank 1: the schedule is not progressing (buffered sends)");
  expect_problem(deadlock, "rank 1 waits at 1F1 for 0F1 on rank 0: the schedule is not progressing (buffered sends)");
  // F(1, j) after F(0, j) on one rank (interleaved stages on rank 0): the simulation sees the order.
  expect_problem("rank 0: 1F0 0F0 1B0 0B0\n", "rank 0 waits at 1F0 for 0F0, which comes later on rank 0");
}

TEST(PipelineValidator, ReportsADeadlockThatOnlyRendezvousSendsHave) {
  // Both ranks send before they receive what the other sends: fine while sends are buffered, a hang
  // when a send blocks until its receive is posted (Megatron-LM#5100).
  const std::string_view both_send_first =
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
      "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n";
  EXPECT_EQ(problems_of(both_send_first, SendSemantics::buffered), "");
  expect_problem(both_send_first, "rank 0 waits at 0SEND_F1 for 1RECV_F1 on rank 1: the schedule is not progressing (rendezvous sends)",
                 SendSemantics::rendezvous);
  expect_problem(both_send_first, "rank 1 waits at 1SEND_B0 for 0RECV_B0 on rank 0: the schedule is not progressing (rendezvous sends)");
  // Rank 1 (odd) receiving first, as the lowering orders it, makes it progress.
  EXPECT_EQ(problems_of("rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
                        "rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1\n"),
            "");
}

TEST(PipelineValidator, CatchesAScheduleOfTheWrongShape) {
  PipelineSchedule schedule = parse_pipeline_schedule(kValid);
  schedule.ranks = 3;
  ASSERT_FALSE(validate_pipeline_schedule(schedule).ok());
  EXPECT_EQ(validate_pipeline_schedule(schedule).problems.back(), "the schedule has 2 rank lists for 3 ranks: give one list per rank");
  schedule = parse_pipeline_schedule(kValid);
  schedule.stages = 3;
  EXPECT_NE(validate_pipeline_schedule(schedule).problems.at(0).find("stages must be a multiple of the ranks"), std::string::npos);
}

}  // namespace
}  // namespace ferry
