// DataParallelGradients: the gradient sink of a data-parallel rank. Backward streams each parameter's
// gradient here; buckets of whole parameters are averaged over the dp group as soon as their parameters
// are complete, overlapping the rest of backward. ZeRO stage 0 all-reduces a full flat f32 buffer;
// stage 1 reduce-scatters it (a rank keeps the average of its partition); stage 2 holds only its
// partition plus the buckets in flight, reducing every micro-batch's buckets as they fill (in a
// pipeline too, where the tied table's bucket alone waits for the stages' sum).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/gradient_sink.h"
#include "engine/core/tensor.h"
#include "engine/grid/flat_layout.h"
#include "models/gpt_parameters.h"

namespace ferry {

class DataParallelGradients final : public GradientSink {
 public:
  // Reductions in flight at once; launching one more first finishes the oldest (a fixed point, so a
  // dry run frees buffers where a real run does).
  static constexpr std::size_t kBucketsInFlight = 2;

  // `parameters`: the model's (or its part's) parameters; `zero_stage` 0, 1 or 2; `bucket_elements`:
  // DeepSpeed's reduce_bucket_size (0: one bucket).
  // `overlap` false (DeepSpeed's overlap_comm off): each bucket's reduction is waited for as soon as it
  // starts, so none of it hides behind backward.
  // `partition_off_device` (stage 2 only): the partition's averaged gradients are not kept on the
  // device; each landed piece goes to the sink set_partition_sink() names (ZeRO-Offload's host gradients).
  // `pipeline` (stage 2): how a pipeline rank's buckets are cut.
  struct PipelineBuckets {
    // A model index (the tied token table): a bucket of its own, which a pipeline step accumulates
    // whole until reduce_accumulated(), after the stages have summed it.
    std::optional<std::size_t> held;
    // Model indices of the parameters that start each of the rank's pipeline stages (after the first): no
    // bucket spans two stages, so each stage's backward completes its own buckets.
    std::vector<std::size_t> stage_starts;
  };
  DataParallelGradients(Device& device, const std::vector<NamedTensor>& parameters, Communicator& dp, int zero_stage,
                        std::int64_t bucket_elements, bool overlap = true, bool partition_off_device = false,
                        const PipelineBuckets& pipeline = {});
  // Where stage 2 with the partition off the device hands each landed piece: accumulate(owned index,
  // offset, piece), the owned index counting the parameters that have elements in owned() (in order)
  // and the offset within that parameter's owned part. Set before the first step.
  void set_partition_sink(GradientSink* sink) { partition_sink_ = sink; }
  ~DataParallelGradients() override;
  DataParallelGradients(const DataParallelGradients&) = delete;
  DataParallelGradients& operator=(const DataParallelGradients&) = delete;

  const FlatLayout& layout() const { return layout_; }
  int zero_stage() const { return zero_stage_; }
  // This rank's share of the flat space: its partition (stages 1, 2) or everything (stage 0).
  FlatRange owned() const { return owned_; }

  // Zeroes the gradients (before a step's first micro-batch).
  void begin_step();
  // Before each micro-batch's backward: stages 0 and 1 reduce during the step's last one only.
  void begin_micro_batch(bool last);
  // A pipeline step, after begin_step(): a schedule interleaves the micro-batches' backwards, so none is
  // "the last". Stages 0 and 1 only accumulate; reduce_accumulated() then starts every bucket's
  // reduction at once, after the pipeline has summed the tied table into the accumulated sums. Stage 2
  // starts a bucket's reduction once each of its parameters has completed (in whichever micro-batches),
  // holds the `held` bucket whole, and reduce_accumulated() starts it and every bucket still open.
  void accumulate_whole_step();
  void reduce_accumulated();
  // The accumulated, not yet reduced, f32 gradient of model parameter `index` (accumulate_whole_step()
  // only, before reduce_accumulated(); at stage 2 only the `held` parameter's).
  Tensor accumulated_gradient(std::size_t index);
  // Waits for every reduction; then owned_gradients() holds the dp-averaged gradients of owned().
  void finish_step();
  // Seconds this step spent blocked waiting for reductions (the part of the communication backward did
  // not hide), since begin_step().
  double wait_seconds() const { return wait_seconds_; }
  // f32 [owned().size()] on the device: the averaged gradients after finish_step() (undefined when the
  // partition is off the device).
  Tensor owned_gradients() const;
  // The averaged gradient of model parameter `index` (NamedTensor::index) restricted to owned(): its
  // elements [range.begin - parameter start, ...) as a flat f32 view, with the range in flat elements.
  struct OwnedPiece {
    FlatRange range;       // flat elements
    std::int64_t offset;   // first element within the parameter
    Tensor gradient;       // f32 view of range.size() elements
  };
  std::optional<OwnedPiece> owned_piece(std::size_t position) const;

  void accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) override;
  void accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) override;
  void parameter_complete(std::size_t index) override;

 private:
  // The request is declared last, so it is destroyed (waited for) before the buffers it uses.
  struct InFlight {
    Tensor received;     // stages 1 and 2: this rank's piece of the bucket (communication)
    FlatRange piece;     // the flat elements `received` holds
    Tensor bucket;       // stage 2: the bucket's buffer, kept alive until the reduction completes
    std::unique_ptr<CommRequest> request;
  };
  std::size_t position_of(std::size_t index) const;
  // The f32 view where parameter `position`'s gradient elements [offset, offset + count) accumulate.
  Tensor target(std::size_t position, std::int64_t offset, std::int64_t count);
  void launch(std::size_t bucket);
  void land(InFlight& flight);  // the received piece into the owned gradients
  void land_oldest();

  Device& device_;
  Communicator& dp_;
  int zero_stage_;
  std::vector<std::optional<std::size_t>> positions_;  // [model index] -> position in the layout
  FlatLayout layout_;
  std::vector<GradientBucket> buckets_;
  std::vector<std::size_t> bucket_of_;   // [position] -> bucket
  std::vector<std::size_t> pending_;     // [bucket] -> parameters not yet complete this micro-batch
  std::vector<char> completed_;          // stage 2 in a pipeline step: [position] -> completed since its bucket opened
  std::optional<std::size_t> held_bucket_;  // stage 2: the `held` parameter's bucket
  bool whole_step_ = false;              // between accumulate_whole_step() and reduce_accumulated()
  bool pipeline_step_ = false;           // since accumulate_whole_step(), until the next begin_step()
  FlatRange owned_;
  Tensor full_;       // stages 0, 1: f32 [total]
  Tensor partition_;  // stage 2: f32 [owned().size()]
  std::vector<Tensor> open_buckets_;  // stage 2: [bucket] -> its buffer while it fills
  std::deque<InFlight> in_flight_;
  bool reducing_ = false;
  bool overlap_ = true;
  bool partition_off_device_ = false;
  GradientSink* partition_sink_ = nullptr;
  std::vector<std::size_t> owned_index_;  // [position] -> index among the parameters with owned elements
  double wait_seconds_ = 0;
};

}  // namespace ferry
