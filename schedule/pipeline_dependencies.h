// What each action of a pipeline schedule waits for besides the earlier actions on its own rank: the
// result of the neighbouring stage (through a receive when the schedule has one, else directly), and
// for a receive its matching send. The validator, the simulator and the lowering all read this graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "schedule/pipeline_schedule.h"

namespace ferry {

struct PipelineActionHash {
  std::size_t operator()(const PipelineAction& action) const noexcept;
};
using PipelineActionSet = std::unordered_set<PipelineAction, PipelineActionHash>;

bool is_send(const PipelineAction& action);  // SEND_F or SEND_B

// The send or receive at the other end of a transfer: sSEND_Fj <-> (s+1)RECV_Fj, sSEND_Bj <-> (s-1)RECV_Bj.
PipelineAction matching_communication(const PipelineAction& communication);
// The receive that brings a compute action its input from the neighbouring stage (F from stage s-1, B or
// I from stage s+1), and the send that carries its result onward; nullopt at the pipeline's ends and for W.
std::optional<PipelineAction> input_receive(const PipelineAction& compute, std::int32_t stages);
std::optional<PipelineAction> output_send(const PipelineAction& compute, std::int32_t stages);

struct ActionInput {
  PipelineAction action;
  // The input comes straight from another rank's compute action (no receive stands in for it): a
  // compute-only schedule, where the transfer is implied.
  bool implied_transfer = false;
};

class PipelineDependencies {
 public:
  explicit PipelineDependencies(const PipelineSchedule& schedule);

  // The actions that must be done before `action` can run, besides the earlier ones on its rank. A
  // receive's input is its matching send. Inputs the schedule lacks are still listed (they never finish).
  std::vector<ActionInput> inputs(const PipelineAction& action) const;
  // The compute action whose result a send or receive carries (F, or the B or I of the gradient), and
  // the one that needs it on the other side.
  PipelineAction transfer_producer(const PipelineAction& communication) const;
  PipelineAction transfer_consumer(const PipelineAction& communication) const;
  // The rank whose list holds `action` (its first occurrence); nullopt when no rank has it.
  std::optional<std::int32_t> rank_holding(const PipelineAction& action) const;
  bool contains(const PipelineAction& action) const { return rank_holding(action).has_value(); }
  std::int32_t rank_of_stage(std::int32_t stage) const { return stage % ranks_; }
  std::int32_t stages() const { return stages_; }

 private:
  // Stage `stage`'s backward for `micro_batch`, which makes the gradient it sends back and consumes the
  // one it receives: I when the schedule splits that backward, else B.
  PipelineAction stage_backward(std::int32_t stage, std::int32_t micro_batch) const;
  ActionInput input_from(const PipelineAction& producer, const std::optional<PipelineAction>& receive,
                         std::int32_t consumer_stage) const;

  std::int32_t ranks_;
  std::int32_t stages_;
  std::unordered_map<PipelineAction, std::int32_t, PipelineActionHash> rank_holding_;
};

}  // namespace ferry
