// Schedules as text and as PyTorch's CSV: exact round trips both ways, and parse errors with the line and
// column of the problem.
#include <gtest/gtest.h>

#include "schedule/pipeline_schedule.h"

namespace ferry {
namespace {

std::vector<PipelineSchedule> samples() {
  std::vector<PipelineSchedule> schedules;
  for (const char* name : {"gpipe", "1f1b", "1f1b-deep", "interleaved:2", "zb-h1"}) {
    const PipelineSchedule compute = generate_pipeline_schedule(name, 4, 8);
    schedules.push_back(compute);
    schedules.push_back(lower_pipeline_communication(compute));
  }
  schedules.push_back(generate_pipeline_schedule("interleaved:3", 2, 12));
  return schedules;
}

std::string error_of(std::string_view text) {
  try {
    parse_pipeline_schedule(text);
  } catch (const ScheduleFormatError& error) {
    return error.what();
  }
  return "parsed";
}

TEST(PipelineFormat, TextRoundTripsExactly) {
  for (const PipelineSchedule& schedule : samples()) {
    const std::string text = format_pipeline_schedule(schedule);
    const PipelineSchedule parsed = parse_pipeline_schedule(text);
    EXPECT_EQ(parsed.name, schedule.name);
    EXPECT_EQ(parsed.ranks, schedule.ranks);
    EXPECT_EQ(parsed.stages, schedule.stages);
    EXPECT_EQ(parsed.micro_batches, schedule.micro_batches);
    EXPECT_EQ(parsed.actions, schedule.actions) << text;
    EXPECT_EQ(format_pipeline_schedule(parsed), text);
  }
}

TEST(PipelineFormat, CsvRoundTripsExactly) {
  for (const PipelineSchedule& schedule : samples()) {
    const std::string csv = format_pipeline_schedule_csv(schedule);
    const PipelineSchedule parsed = parse_pipeline_schedule(csv);
    // PyTorch's CSV has no header: the sizes are inferred from the actions, the name is "custom".
    EXPECT_EQ(parsed.name, "custom");
    EXPECT_EQ(parsed.ranks, schedule.ranks);
    EXPECT_EQ(parsed.stages, schedule.stages);
    EXPECT_EQ(parsed.micro_batches, schedule.micro_batches);
    EXPECT_EQ(parsed.actions, schedule.actions) << csv;
    EXPECT_EQ(format_pipeline_schedule_csv(parsed), csv);
  }
}

TEST(PipelineFormat, CsvIsOneRowPerRankWithEmptyCellsForBubbles) {
  const PipelineSchedule schedule = generate_pipeline_schedule("1f1b", 2, 2);
  EXPECT_EQ(format_pipeline_schedule_csv(schedule), "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
  PipelineSchedule lone_bubble = schedule;
  lone_bubble.actions = {{std::nullopt}, {}};
  EXPECT_EQ(format_pipeline_schedule_csv(lone_bubble), "\"\"\n\n");
  EXPECT_EQ(parse_pipeline_schedule("\"\"\n\n0F0\n").actions, (std::vector<RankActions>{{std::nullopt}, {}, {PipelineAction{0, PipelineActionType::forward, 0}}}));
}

TEST(PipelineFormat, TextSkipsCommentsAndBlankLinesAndInfersSizes) {
  const PipelineSchedule schedule = parse_pipeline_schedule("# hand-edited\n\nrank 0: 0F0 2F0 - 2B0 0B0   # two chunks\nrank 1: 1F0 3F0 3B0 1B0\n");
  EXPECT_EQ(schedule.name, "custom");
  EXPECT_EQ(schedule.ranks, 2);
  EXPECT_EQ(schedule.stages, 4);
  EXPECT_EQ(schedule.micro_batches, 1);
  EXPECT_EQ(schedule.actions[0].size(), 5u);
  EXPECT_EQ(schedule.actions[0][2], std::nullopt);
  // Labels are optional; stages round up to whole chunks per rank.
  EXPECT_EQ(parse_pipeline_schedule("0F4 2F0\n1F0\n").stages, 4);
  EXPECT_EQ(parse_pipeline_schedule("0F4 2F0\n1F0\n").micro_batches, 5);
}

TEST(PipelineFormat, ErrorsNameTheLineAndColumn) {
  EXPECT_EQ(error_of("rank 0: 0F0 0F1\nrank 1: 1F0 1Q0\n").substr(0, 40), "line 2, column 13: '1Q0' is not an actio");
  EXPECT_NE(error_of("0F0,,0Z1\n").find("line 1, column 6: '0Z1' is not an action"), std::string::npos);
  EXPECT_NE(error_of("0F0, 0F1 ,0X\n").find("line 1, column 11: '0X'"), std::string::npos);
  EXPECT_NE(error_of("rank 0: 0F0\nrank 2: 2F0\n").find("line 2, column 1: expected 'rank 1:'"), std::string::npos);
  EXPECT_NE(error_of("rank zero: 0F0\n").find("line 1, column 1: expected 'rank 0:'"), std::string::npos);
  EXPECT_NE(error_of("# only a comment\n").find("no rank lines"), std::string::npos);
  EXPECT_NE(error_of("# ferry pipeline schedule: name=x ranks=3\nrank 0: 0F0\n").find("line 1, column 1: the header declares ranks=3 but the file has 1 rank lines"),
            std::string::npos);
  EXPECT_NE(error_of("# ferry pipeline schedule: name=x ranks=two\n").find("line 1, column 35: ranks must be a whole number >= 1, got 'two'"),
            std::string::npos);
  EXPECT_NE(error_of("# ferry pipeline schedule: colour=blue\n").find("'colour=blue' is not a header field"), std::string::npos);
}

}  // namespace
}  // namespace ferry
