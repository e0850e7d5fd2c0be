// PipelineAction's text form in PyTorch's notation, both ways, and the sends and receives that pair up.
#include <gtest/gtest.h>

#include "schedule/pipeline_dependencies.h"
#include "schedule/pipeline_schedule.h"

namespace ferry {
namespace {

using Type = PipelineActionType;

TEST(PipelineAction, ParsesAndPrintsEveryType) {
  const std::vector<std::pair<std::string, PipelineAction>> cases{
      {"0F1", {0, Type::forward, 1}},           {"1B0", {1, Type::backward, 0}},
      {"2I3", {2, Type::backward_input, 3}},    {"2W3", {2, Type::backward_weight, 3}},
      {"0SEND_F1", {0, Type::send_forward, 1}}, {"1RECV_F0", {1, Type::receive_forward, 0}},
      {"3SEND_B7", {3, Type::send_backward, 7}}, {"1RECV_B0", {1, Type::receive_backward, 0}},
      {"12F345", {12, Type::forward, 345}},
  };
  for (const auto& [text, action] : cases) {
    EXPECT_EQ(PipelineAction::parse(text), action) << text;
    EXPECT_EQ(action.to_string(), text);
    EXPECT_EQ(action.is_communication(), text.find('_') != std::string::npos) << text;
  }
}

TEST(PipelineAction, RejectsGarbage) {
  for (const char* text : {"", "F1", "0F", "0X1", "0F1x", "-1F0", "0SEND_X1", "0 F1", "0f1", "0SEND1", "0RECV_F",
                           "99999999999F0", "0F99999999999", "1B-1", "0F1 "}) {
    EXPECT_THROW(PipelineAction::parse(text), ScheduleFormatError) << "'" << text << "'";
  }
  try {
    PipelineAction::parse("0X1");
    FAIL() << "0X1 parsed";
  } catch (const ScheduleFormatError& error) {
    EXPECT_NE(std::string(error.what()).find("'0X1' is not an action"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("0SEND_F1"), std::string::npos) << error.what();
  }
}

TEST(PipelineAction, SendsAndReceivesPairAcrossNeighbouringStages) {
  EXPECT_EQ(matching_communication(PipelineAction::parse("0SEND_F1")), PipelineAction::parse("1RECV_F1"));
  EXPECT_EQ(matching_communication(PipelineAction::parse("1RECV_F1")), PipelineAction::parse("0SEND_F1"));
  EXPECT_EQ(matching_communication(PipelineAction::parse("1SEND_B4")), PipelineAction::parse("0RECV_B4"));
  EXPECT_EQ(matching_communication(PipelineAction::parse("0RECV_B4")), PipelineAction::parse("1SEND_B4"));
  EXPECT_THROW(matching_communication(PipelineAction::parse("0F1")), std::logic_error);

  const std::int32_t stages = 3;
  EXPECT_EQ(input_receive(PipelineAction::parse("0F2"), stages), std::nullopt);
  EXPECT_EQ(input_receive(PipelineAction::parse("1F2"), stages), PipelineAction::parse("1RECV_F2"));
  EXPECT_EQ(input_receive(PipelineAction::parse("1I2"), stages), PipelineAction::parse("1RECV_B2"));
  EXPECT_EQ(input_receive(PipelineAction::parse("2B2"), stages), std::nullopt);
  EXPECT_EQ(output_send(PipelineAction::parse("2F2"), stages), std::nullopt);
  EXPECT_EQ(output_send(PipelineAction::parse("1B2"), stages), PipelineAction::parse("1SEND_B2"));
  EXPECT_EQ(output_send(PipelineAction::parse("0B2"), stages), std::nullopt);
  EXPECT_EQ(output_send(PipelineAction::parse("1W2"), stages), std::nullopt);
}

}  // namespace
}  // namespace ferry
