// Runs one rank's share of a pipeline schedule: its stages' forwards and backwards per micro-batch, the
// sends and receives between stages, and a stash per (stage, micro-batch) that lives from the forward
// to the backward. A transport moves tensors between the ranks (the pipeline group's communicator).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt_model.h"
#include "schedule/pipeline_partition.h"
#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_simulator.h"

namespace ferry {

// One message between pipeline ranks: a stage output or input gradient sent, or a buffer to receive into.
struct StageMessage {
  bool send = true;
  std::int32_t peer_rank = 0;
  int tag = 0;
  Tensor tensor;
};

// Moves stage outputs and input gradients between ranks. The messages a rank has between two of its
// compute actions go together and are all complete when exchange returns: the ranks' sends and receives
// progress at once (NCCL needs them in one group when two ranks send to each other), and a sent tensor
// is freed at that fixed point of the schedule, not when a peer happens to take it, so every rank's
// peaks are the dry run's whatever the timing.
class PipelineTransport {
 public:
  virtual ~PipelineTransport() = default;
  virtual void exchange(std::span<const StageMessage> messages) = 0;
};

// The tensors of one micro-batch (B*T inputs and targets), for the first and the last stage.
struct MicroBatchTokens {
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
};

// The model part a rank holds: the blocks of its stages, the embedding with stage 0, the head with the last.
GptModelPart pipeline_rank_part(const PipelineSchedule& schedule, std::int32_t rank, const std::vector<StageBlocks>& stage_blocks,
                                std::int64_t layers);

struct PipelineRankSetup {
  const PipelineSchedule* schedule = nullptr;  // lowered (sends and receives between ranks)
  std::int32_t rank = 0;
  std::vector<StageBlocks> stage_blocks;       // [stage], for every stage of the pipeline
  std::int64_t batch = 1;
  std::int64_t sequence = 1;
  std::uint64_t seed = 0;
  std::vector<ActivationKeep> keeps;           // [layer]; empty: keep all
  // The index of the step's first micro-batch in the global batch (a data-parallel rank's share starts
  // past the others'): dropout's random keys are those of one rank with the whole batch.
  std::int64_t first_micro_batch = 0;
};

// What one micro-batch keeps on one of the rank's stages, measured on the stage's first F and first W
// (every micro-batch has the same shapes): the change of the stash across the action.
struct StageStashBytes {
  std::int32_t stage = 0;
  std::int64_t forward = 0;          // from its F to its B (or I)
  std::int64_t kept_for_weight = 0;  // Zero Bubble: from its I to its W (0 without a split backward)
};

// What a step held, measured at the boundaries between actions: the activations stashed between a
// micro-batch's F and its B (or I, and then until its W) (the allocator's activation bytes, less the
// tensors in transit: stage outputs waiting for or in their sends, and received inputs whose F has not
// run yet).
struct PipelineStashMeasure {
  std::int64_t after_first_forward = 0;  // one micro-batch's stash on the rank's first stage
  std::int64_t peak = 0;
  std::vector<StageStashBytes> stages;   // the rank's stages, first to last
};

// The simulator's per-stage bytes from a rank's measure (the other ranks' stages: 0 bytes).
StageMemory stage_memory(const PipelineStashMeasure& measure, std::int32_t stages);

class PipelineRankExecutor {
 public:
  PipelineRankExecutor(GptModel& model, PipelineTransport& transport, PipelineRankSetup setup);

  // Before a step: every micro-batch's tokens (the schedule's m of them; stages take what they need);
  // the backward starts from the mean loss times `loss_scale` (fp16's loss scaling).
  void begin_step(std::int64_t step, const std::vector<MicroBatchTokens>& micro_batches, double loss_scale = 1.0);
  // Runs the rank's actions in order to the end of its list (receives wait for their messages).
  void run();
  // Checks that every stash was consumed.
  void finish_step();
  // The sum of the micro-batches' mean token losses (on the rank with the last stage; else 0).
  double loss_sum() const { return loss_sum_; }
  const PipelineStashMeasure& stash() const { return stash_; }
  const PipelineRankSetup& setup() const { return setup_; }
  GptModel& model() const { return model_; }
  bool holds_first_stage() const { return setup_.rank == setup_.schedule->rank_of_stage(0); }
  bool holds_last_stage() const { return setup_.rank == setup_.schedule->rank_of_stage(setup_.schedule->stages - 1); }

 private:
  struct MicroBatchState {
    Tensor tokens;                         // first stage: from F to B (the embedding's backward)
    Tensor input;                          // the stage's input (received or handed over on this rank)
    std::vector<BlockActivations> blocks;  // the stage's blocks, first to last
    Tensor output;                         // last stage: the head's input; else waits for its SEND_F
    Tensor output_gradient;                // received or handed over from the next stage
    Tensor input_gradient;                 // waits for its SEND_B
    std::vector<BlockWeightGradientInputs> deferred;  // Zero Bubble: from I to W, per block
  };
  using Key = std::pair<std::int32_t, std::int32_t>;  // (stage, micro-batch)

  void execute(const PipelineAction& action);
  void forward(std::int32_t stage, std::int32_t micro_batch);
  void backward(std::int32_t stage, std::int32_t micro_batch, bool split);
  void backward_weight(std::int32_t stage, std::int32_t micro_batch);
  // The run of messages from actions_[next_] on, exchanged together; returns the actions it took.
  std::size_t communicate();
  // A receive's buffer, or a send's tensor (taken from its micro-batch's state).
  StageMessage message(const PipelineAction& action);
  // The stash now: the allocator's activation bytes less the stage inputs received and outputs to send.
  std::int64_t stash_bytes();
  // After an action: the peak, and the stage's sizes on its first F and first W (`before`: the stash
  // before the action).
  void measure_stash(const PipelineAction& action, std::int64_t before);
  StageStashBytes& stage_stash(std::int32_t stage);
  int message_tag(std::int32_t receiving_stage, std::int32_t micro_batch, bool gradient) const;
  MicroBatchState& state(std::int32_t stage, std::int32_t micro_batch);
  cpu::RandomKey key(std::int32_t micro_batch) const;
  Tensor device_tokens(const std::vector<std::int32_t>& values, const char* tag) const;

  GptModel& model_;
  PipelineTransport& transport_;
  PipelineRankSetup setup_;
  std::vector<PipelineAction> actions_;  // this rank's, bubbles dropped
  std::size_t next_ = 0;
  std::int64_t step_ = 0;
  double loss_scale_ = 1.0;
  const std::vector<MicroBatchTokens>* micro_batches_ = nullptr;
  std::map<Key, MicroBatchState> states_;
  double loss_sum_ = 0;
  bool measured_first_forward_ = false;
  std::set<std::pair<std::int32_t, PipelineActionType>> measured_;  // (stage, F or W) sized once
  PipelineStashMeasure stash_;
};

}  // namespace ferry
