#include "schedule/pipeline_dependencies.h"

#include <functional>

namespace ferry {

std::size_t PipelineActionHash::operator()(const PipelineAction& action) const noexcept {
  const std::uint64_t packed = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(action.stage)) << 36) ^
                               (static_cast<std::uint64_t>(action.type) << 32) ^
                               static_cast<std::uint32_t>(action.micro_batch);
  return std::hash<std::uint64_t>{}(packed);
}

bool is_send(const PipelineAction& action) {
  return action.type == PipelineActionType::send_forward || action.type == PipelineActionType::send_backward;
}

PipelineAction matching_communication(const PipelineAction& communication) {
  const std::int32_t stage = communication.stage;
  const std::int32_t micro_batch = communication.micro_batch;
  switch (communication.type) {
    case PipelineActionType::send_forward: return {stage + 1, PipelineActionType::receive_forward, micro_batch};
    case PipelineActionType::receive_forward: return {stage - 1, PipelineActionType::send_forward, micro_batch};
    case PipelineActionType::send_backward: return {stage - 1, PipelineActionType::receive_backward, micro_batch};
    case PipelineActionType::receive_backward: return {stage + 1, PipelineActionType::send_backward, micro_batch};
    case PipelineActionType::forward:
    case PipelineActionType::backward:
    case PipelineActionType::backward_input:
    case PipelineActionType::backward_weight: break;
  }
  throw std::logic_error(communication.to_string() + " is a compute action: it has no matching send or receive");
}

std::optional<PipelineAction> input_receive(const PipelineAction& compute, std::int32_t stages) {
  switch (compute.type) {
    case PipelineActionType::forward:
      if (compute.stage == 0) return std::nullopt;
      return PipelineAction{compute.stage, PipelineActionType::receive_forward, compute.micro_batch};
    case PipelineActionType::backward:
    case PipelineActionType::backward_input:
      if (compute.stage == stages - 1) return std::nullopt;
      return PipelineAction{compute.stage, PipelineActionType::receive_backward, compute.micro_batch};
    default: return std::nullopt;
  }
}

std::optional<PipelineAction> output_send(const PipelineAction& compute, std::int32_t stages) {
  switch (compute.type) {
    case PipelineActionType::forward:
      if (compute.stage == stages - 1) return std::nullopt;
      return PipelineAction{compute.stage, PipelineActionType::send_forward, compute.micro_batch};
    case PipelineActionType::backward:
    case PipelineActionType::backward_input:
      if (compute.stage == 0) return std::nullopt;
      return PipelineAction{compute.stage, PipelineActionType::send_backward, compute.micro_batch};
    default: return std::nullopt;
  }
}

PipelineDependencies::PipelineDependencies(const PipelineSchedule& schedule)
    : ranks_(schedule.ranks < 1 ? 1 : schedule.ranks), stages_(schedule.stages) {
  for (std::size_t rank = 0; rank < schedule.actions.size(); ++rank) {
    for (const std::optional<PipelineAction>& action : schedule.actions[rank]) {
      if (action) rank_holding_.try_emplace(*action, static_cast<std::int32_t>(rank));
    }
  }
}

std::optional<std::int32_t> PipelineDependencies::rank_holding(const PipelineAction& action) const {
  const auto found = rank_holding_.find(action);
  if (found == rank_holding_.end()) return std::nullopt;
  return found->second;
}

PipelineAction PipelineDependencies::stage_backward(std::int32_t stage, std::int32_t micro_batch) const {
  const PipelineAction input_gradient{stage, PipelineActionType::backward_input, micro_batch};
  if (contains(input_gradient)) return input_gradient;
  return {stage, PipelineActionType::backward, micro_batch};
}

PipelineAction PipelineDependencies::transfer_producer(const PipelineAction& communication) const {
  const PipelineAction sent = is_send(communication) ? communication : matching_communication(communication);
  if (sent.type == PipelineActionType::send_forward) return {sent.stage, PipelineActionType::forward, sent.micro_batch};
  return stage_backward(sent.stage, sent.micro_batch);
}

PipelineAction PipelineDependencies::transfer_consumer(const PipelineAction& communication) const {
  const PipelineAction received = is_send(communication) ? matching_communication(communication) : communication;
  if (received.type == PipelineActionType::receive_forward) return {received.stage, PipelineActionType::forward, received.micro_batch};
  return stage_backward(received.stage, received.micro_batch);
}

ActionInput PipelineDependencies::input_from(const PipelineAction& producer, const std::optional<PipelineAction>& receive,
                                             std::int32_t consumer_stage) const {
  if (rank_of_stage(producer.stage) == rank_of_stage(consumer_stage)) return {producer, false};
  if (receive && contains(*receive)) return {*receive, false};
  return {producer, true};
}

std::vector<ActionInput> PipelineDependencies::inputs(const PipelineAction& action) const {
  const std::int32_t stage = action.stage;
  const std::int32_t micro_batch = action.micro_batch;
  std::vector<ActionInput> result;
  switch (action.type) {
    case PipelineActionType::forward:
      if (stage > 0) {
        result.push_back(input_from({stage - 1, PipelineActionType::forward, micro_batch}, input_receive(action, stages_), stage));
      }
      break;
    case PipelineActionType::backward:
    case PipelineActionType::backward_input:
      result.push_back({{stage, PipelineActionType::forward, micro_batch}, false});
      if (stage < stages_ - 1) {
        result.push_back(input_from(stage_backward(stage + 1, micro_batch), input_receive(action, stages_), stage));
      }
      break;
    case PipelineActionType::backward_weight:
      result.push_back({{stage, PipelineActionType::backward_input, micro_batch}, false});
      break;
    case PipelineActionType::send_forward:
      result.push_back({{stage, PipelineActionType::forward, micro_batch}, false});
      break;
    case PipelineActionType::send_backward:
      result.push_back({stage_backward(stage, micro_batch), false});
      break;
    case PipelineActionType::receive_forward:
    case PipelineActionType::receive_backward:
      result.push_back({matching_communication(action), false});
      break;
  }
  return result;
}

}  // namespace ferry
