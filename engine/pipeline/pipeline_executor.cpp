#include "engine/pipeline/pipeline_executor.h"

#include <stdexcept>
#include <string>

#include "engine/core/op_recorder.h"

namespace ferry {
namespace {

std::string where(const PipelineAction& action, std::int32_t rank) {
  return "rank " + std::to_string(rank) + ", action " + action.to_string();
}

// An action of a stage this rank does not hold is a schedule error.
void require_own_stage(const PipelineSchedule& schedule, const PipelineAction& action, std::int32_t rank) {
  if (schedule.rank_of_stage(action.stage) != rank) {
    throw std::logic_error(where(action, rank) + ": the stage lives on rank " + std::to_string(schedule.rank_of_stage(action.stage)));
  }
}

}  // namespace

GptModelPart pipeline_rank_part(const PipelineSchedule& schedule, std::int32_t rank, const std::vector<StageBlocks>& stage_blocks,
                                std::int64_t layers) {
  if (static_cast<std::int32_t>(stage_blocks.size()) != schedule.stages) {
    throw std::invalid_argument("a block split into " + std::to_string(stage_blocks.size()) + " stages for a schedule of " +
                                std::to_string(schedule.stages));
  }
  GptModelPart part;
  part.blocks.assign(static_cast<std::size_t>(layers), false);
  part.embedding = schedule.rank_of_stage(0) == rank;
  part.head = schedule.rank_of_stage(schedule.stages - 1) == rank;
  for (std::int32_t stage = 0; stage < schedule.stages; ++stage) {
    if (schedule.rank_of_stage(stage) != rank) continue;
    const StageBlocks& blocks = stage_blocks[static_cast<std::size_t>(stage)];
    for (std::int64_t layer = blocks.first; layer < blocks.end; ++layer) part.blocks[static_cast<std::size_t>(layer)] = true;
  }
  return part;
}

PipelineRankExecutor::PipelineRankExecutor(GptModel& model, PipelineTransport& transport, PipelineRankSetup setup)
    : model_(model), transport_(transport), setup_(std::move(setup)) {
  if (setup_.schedule == nullptr) throw std::invalid_argument("a pipeline executor needs a schedule");
  const PipelineSchedule& schedule = *setup_.schedule;
  if (setup_.rank < 0 || setup_.rank >= schedule.ranks) {
    throw std::invalid_argument("rank " + std::to_string(setup_.rank) + " is not in a schedule of " + std::to_string(schedule.ranks) + " ranks");
  }
  if (static_cast<std::int32_t>(setup_.stage_blocks.size()) != schedule.stages) {
    throw std::invalid_argument("the model is split into " + std::to_string(setup_.stage_blocks.size()) + " stages but the schedule has " +
                                std::to_string(schedule.stages));
  }
  for (const std::optional<PipelineAction>& action : schedule.actions.at(static_cast<std::size_t>(setup_.rank))) {
    if (action) actions_.push_back(*action);
  }
}

void PipelineRankExecutor::begin_step(std::int64_t step, const std::vector<MicroBatchTokens>& micro_batches, double loss_scale) {
  if (static_cast<std::int32_t>(micro_batches.size()) != setup_.schedule->micro_batches) {
    throw std::invalid_argument(std::to_string(micro_batches.size()) + " micro-batches given to a schedule of " +
                                std::to_string(setup_.schedule->micro_batches));
  }
  step_ = step;
  loss_scale_ = loss_scale;
  micro_batches_ = &micro_batches;
  next_ = 0;
  loss_sum_ = 0;
  states_.clear();
  measured_first_forward_ = false;
  measured_.clear();
  stash_ = {};
  for (std::int32_t stage = setup_.rank; stage < setup_.schedule->stages; stage += setup_.schedule->ranks) {
    stash_.stages.push_back(StageStashBytes{stage, 0, 0});
  }
}

void PipelineRankExecutor::run() {
  while (next_ < actions_.size()) {
    if (actions_[next_].is_communication()) {
      const std::size_t first = next_;
      next_ += communicate();
      for (std::size_t each = first; each < next_; ++each) measure_stash(actions_[each], 0);
      continue;
    }
    const PipelineAction& action = actions_[next_];
    const std::int64_t before = stash_bytes();
    execute(action);
    ++next_;
    measure_stash(action, before);
  }
}

void PipelineRankExecutor::finish_step() {
  for (const auto& [key, state] : states_) {
    if (state.tokens.defined() || state.input.defined() || !state.blocks.empty() || state.output.defined() ||
        state.output_gradient.defined() || state.input_gradient.defined() || !state.deferred.empty()) {
      throw std::logic_error("rank " + std::to_string(setup_.rank) + ": stage " + std::to_string(key.first) + " micro-batch " +
                             std::to_string(key.second) + " still holds tensors after the step: the schedule is incomplete");
    }
  }
  states_.clear();
}

void PipelineRankExecutor::execute(const PipelineAction& action) {
  require_own_stage(*setup_.schedule, action, setup_.rank);
  switch (action.type) {
    case PipelineActionType::forward: return forward(action.stage, action.micro_batch);
    case PipelineActionType::backward: return backward(action.stage, action.micro_batch, false);
    case PipelineActionType::backward_input: return backward(action.stage, action.micro_batch, true);
    case PipelineActionType::backward_weight: return backward_weight(action.stage, action.micro_batch);
    default: throw std::logic_error(where(action, setup_.rank) + ": not a compute action");
  }
}

PipelineRankExecutor::MicroBatchState& PipelineRankExecutor::state(std::int32_t stage, std::int32_t micro_batch) {
  if (micro_batch < 0 || micro_batch >= setup_.schedule->micro_batches) {
    throw std::logic_error("micro-batch " + std::to_string(micro_batch) + " is outside the step's " +
                           std::to_string(setup_.schedule->micro_batches));
  }
  return states_[{stage, micro_batch}];
}

cpu::RandomKey PipelineRankExecutor::key(std::int32_t micro_batch) const {
  return MicroBatchKey{setup_.seed, static_cast<std::uint64_t>(step_), static_cast<std::uint64_t>(setup_.first_micro_batch + micro_batch)}.key();
}

Tensor PipelineRankExecutor::device_tokens(const std::vector<std::int32_t>& values, const char* tag) const {
  if (static_cast<std::int64_t>(values.size()) != setup_.batch * setup_.sequence) {
    throw std::invalid_argument("a micro-batch of " + std::to_string(values.size()) + " tokens, expected batch x seq = " +
                                std::to_string(setup_.batch * setup_.sequence));
  }
  Tensor tensor = Tensor::empty(model_.device(), {setup_.batch, setup_.sequence}, DType::i32, MemoryCategory::activations, tag);
  tensor.copy_from_host(values.data());
  return tensor;
}

void PipelineRankExecutor::forward(std::int32_t stage, std::int32_t micro_batch) {
  const PipelineSchedule& schedule = *setup_.schedule;
  MicroBatchState& s = state(stage, micro_batch);
  const cpu::RandomKey random = key(micro_batch);
  Tensor x;
  if (stage == 0) {
    s.tokens = device_tokens((*micro_batches_)[static_cast<std::size_t>(micro_batch)].inputs, "tokens");
    x = model_.embedding_forward(s.tokens, random);
  } else {
    if (!s.input.defined()) {
      throw std::logic_error("rank " + std::to_string(setup_.rank) + ": " + PipelineAction{stage, PipelineActionType::forward, micro_batch}.to_string() +
                             " has no input: the schedule receives it nowhere before (a RECV_F is missing)");
    }
    x = std::move(s.input);
  }
  const StageBlocks& blocks = setup_.stage_blocks[static_cast<std::size_t>(stage)];
  for (std::int64_t layer = blocks.first; layer < blocks.end; ++layer) {
    const ActivationKeep keep = setup_.keeps.empty() ? ActivationKeep::all : setup_.keeps[static_cast<std::size_t>(layer)];
    s.blocks.push_back(model_.block_forward(layer, x, random, keep));
    x = s.blocks.back().output;
  }
  // The stage's output: the backward of its last block does not need it, so only this reference keeps
  // it, until the head takes it (last stage), the next stage on this rank does, or its send completes.
  if (!s.blocks.empty()) s.blocks.back().output = Tensor();
  if (stage == schedule.stages - 1) {
    s.output = std::move(x);
  } else if (schedule.rank_of_stage(stage + 1) == setup_.rank) {
    state(stage + 1, micro_batch).input = std::move(x);
  } else {
    s.output = std::move(x);
  }
}

void PipelineRankExecutor::backward(std::int32_t stage, std::int32_t micro_batch, bool split) {
  const PipelineSchedule& schedule = *setup_.schedule;
  MicroBatchState& s = state(stage, micro_batch);
  const PipelineAction action{stage, split ? PipelineActionType::backward_input : PipelineActionType::backward, micro_batch};
  if (s.blocks.empty() && !s.tokens.defined()) {
    throw std::logic_error(where(action, setup_.rank) + ": the backward of a micro-batch whose forward did not run here");
  }
  const cpu::RandomKey random = key(micro_batch);
  Tensor gradient;
  if (stage == schedule.stages - 1) {
    const Tensor targets = device_tokens((*micro_batches_)[static_cast<std::size_t>(micro_batch)].targets, "targets");
    gradient = Tensor::empty(model_.device(), s.output.shape(), model_.parameter_dtype(), MemoryCategory::activation_gradients, "residual.grad");
    const auto tokens = static_cast<double>(setup_.batch * setup_.sequence);
    const auto dloss = static_cast<float>(loss_scale_ / static_cast<double>(schedule.micro_batches));
    loss_sum_ += model_.head_forward(s.output, targets, dloss / static_cast<float>(tokens), gradient) / tokens;
    s.output = Tensor();
  } else {
    if (!s.output_gradient.defined()) {
      throw std::logic_error(where(action, setup_.rank) + ": no gradient from the next stage (a RECV_B is missing before it)");
    }
    gradient = std::move(s.output_gradient);
  }
  const StageBlocks& blocks = setup_.stage_blocks[static_cast<std::size_t>(stage)];
  if (split) s.deferred.resize(s.blocks.size());
  for (std::int64_t layer = blocks.end - 1; layer >= blocks.first; --layer) {
    BlockActivations activations = std::move(s.blocks.back());
    s.blocks.pop_back();
    if (split) {
      gradient = model_.block_backward_input(layer, std::move(activations), std::move(gradient), random,
                                             s.deferred[static_cast<std::size_t>(layer - blocks.first)]);
    } else {
      gradient = model_.block_backward(layer, std::move(activations), std::move(gradient), random);
    }
  }
  if (stage == 0) {
    model_.embedding_backward(s.tokens, gradient, random);
    s.tokens = Tensor();
  } else if (schedule.rank_of_stage(stage - 1) == setup_.rank) {
    state(stage - 1, micro_batch).output_gradient = std::move(gradient);
  } else {
    s.input_gradient = std::move(gradient);
  }
}

void PipelineRankExecutor::backward_weight(std::int32_t stage, std::int32_t micro_batch) {
  MicroBatchState& s = state(stage, micro_batch);
  if (s.deferred.empty()) {
    throw std::logic_error(where({stage, PipelineActionType::backward_weight, micro_batch}, setup_.rank) + ": W before its I");
  }
  const StageBlocks& blocks = setup_.stage_blocks[static_cast<std::size_t>(stage)];
  for (std::int64_t layer = blocks.end - 1; layer >= blocks.first; --layer) {
    model_.block_backward_weight(layer, std::move(s.deferred[static_cast<std::size_t>(layer - blocks.first)]));
  }
  s.deferred.clear();
}

int PipelineRankExecutor::message_tag(std::int32_t receiving_stage, std::int32_t micro_batch, bool gradient) const {
  // Below tied_gradient_tag(): check_pipeline_tags keeps it within an int and the communicator's bound.
  return static_cast<int>((std::int64_t{micro_batch} * setup_.schedule->stages + receiving_stage) * 2 + (gradient ? 1 : 0));
}

StageMessage PipelineRankExecutor::message(const PipelineAction& action) {
  const PipelineSchedule& schedule = *setup_.schedule;
  MicroBatchState& s = state(action.stage, action.micro_batch);
  const bool sends = action.type == PipelineActionType::send_forward || action.type == PipelineActionType::send_backward;
  const bool gradient = action.type == PipelineActionType::send_backward || action.type == PipelineActionType::receive_backward;
  // A forward's output goes to the next stage, a backward's input gradient to the one before; receives
  // come from the other side.
  const std::int32_t peer_stage = (gradient == sends) ? action.stage - 1 : action.stage + 1;
  if (peer_stage < 0 || peer_stage >= schedule.stages) throw std::logic_error(where(action, setup_.rank) + ": no stage to exchange with");
  const std::int32_t peer_rank = schedule.rank_of_stage(peer_stage);
  if (sends) {
    Tensor& tensor = gradient ? s.input_gradient : s.output;
    if (!tensor.defined()) {
      throw std::logic_error(where(action, setup_.rank) + ": nothing to send (its " + (gradient ? "backward" : "forward") + " did not run before it)");
    }
    return StageMessage{true, peer_rank, message_tag(peer_stage, action.micro_batch, gradient), std::exchange(tensor, Tensor())};
  }
  const Shape shape{setup_.batch, setup_.sequence, model_.config().hidden};
  // Activations travel in the parameters' dtype, gradients in f32 (as the model computes them).
  Tensor buffer = gradient ? Tensor::empty(model_.device(), shape, model_.parameter_dtype(), MemoryCategory::activation_gradients, "pipeline.output.grad")
                           : Tensor::empty(model_.device(), shape, model_.parameter_dtype(), MemoryCategory::activations, "pipeline.input");
  (gradient ? s.output_gradient : s.input) = buffer;  // filled by the exchange, before anything reads it
  return StageMessage{false, peer_rank, message_tag(action.stage, action.micro_batch, gradient), std::move(buffer)};
}

std::size_t PipelineRankExecutor::communicate() {
  std::vector<StageMessage> messages;
  for (std::size_t each = next_; each < actions_.size() && actions_[each].is_communication(); ++each) {
    require_own_stage(*setup_.schedule, actions_[each], setup_.rank);
    messages.push_back(message(actions_[each]));
  }
  transport_.exchange(messages);
  return messages.size();  // the sent tensors go with `messages`
}

std::int64_t PipelineRankExecutor::stash_bytes() {
  const AllocatorStatistics statistics = model_.device().allocator().statistics();
  std::int64_t bytes = statistics.category_requested_bytes[static_cast<std::size_t>(MemoryCategory::activations)].current;
  for (const auto& [key, s] : states_) {
    if (s.output.defined() && key.first != setup_.schedule->stages - 1) bytes -= static_cast<std::int64_t>(s.output.storage()->bytes());
    if (s.input.defined()) bytes -= static_cast<std::int64_t>(s.input.storage()->bytes());  // received, its F has not run
  }
  return bytes;
}

StageStashBytes& PipelineRankExecutor::stage_stash(std::int32_t stage) {
  for (StageStashBytes& entry : stash_.stages) {
    if (entry.stage == stage) return entry;
  }
  throw std::logic_error("rank " + std::to_string(setup_.rank) + " holds no stage " + std::to_string(stage));
}

void PipelineRankExecutor::measure_stash(const PipelineAction& action, std::int64_t before) {
  const std::int64_t bytes = stash_bytes();
  stash_.peak = std::max(stash_.peak, bytes);
  const bool forward = action.type == PipelineActionType::forward;
  if (forward && !measured_first_forward_) {
    stash_.after_first_forward = bytes;
    measured_first_forward_ = true;
  }
  if (!forward && action.type != PipelineActionType::backward_weight) return;
  if (!measured_.insert({action.stage, action.type}).second) return;  // sized on the stage's first F and first W
  if (forward) {
    stage_stash(action.stage).forward = bytes - before;
  } else {
    stage_stash(action.stage).kept_for_weight = before - bytes;
  }
}

StageMemory stage_memory(const PipelineStashMeasure& measure, std::int32_t stages) {
  StageMemory memory;
  memory.activation_bytes.assign(static_cast<std::size_t>(stages), 0);
  memory.weight_stash_bytes.assign(static_cast<std::size_t>(stages), 0);
  for (const StageStashBytes& stage : measure.stages) {
    memory.activation_bytes.at(static_cast<std::size_t>(stage.stage)) = stage.forward;
    memory.weight_stash_bytes.at(static_cast<std::size_t>(stage.stage)) = stage.kept_for_weight;
  }
  return memory;
}

}  // namespace ferry
