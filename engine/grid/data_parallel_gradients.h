// DataParallelGradients: the gradient sink of a data-parallel rank. Backward streams each parameter's
// gradient here; buckets of at most reduce_bucket_size elements (cut anywhere in the flat space) are
// averaged over the dp group as soon as their elements are complete, overlapping the rest of backward.
// ZeRO stage 0 all-reduces a full flat f32 buffer; stage 1 reduce-scatters it (a rank keeps the average
// of its partition); stage 2 holds only its partition plus the buckets being filled or in flight,
// reducing every micro-batch's buckets as they fill (in a pipeline too, where the tied table's bucket
// alone waits for the stages' sum). So a stage-2 rank's gradient bytes are its partition plus a bounded
// number of buckets, whatever the model's size.
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

// How a rank's buckets are cut (model indices).
struct GradientBucketCuts {
  // A pipeline's tied token table: a bucket of its own, which a pipeline step accumulates whole until
  // reduce_accumulated(), after the stages have summed it.
  std::optional<std::size_t> held;
  // The parameters that start each of a pipeline rank's stages (after the first): no bucket spans two
  // stages, so each stage's backward completes its own buckets.
  std::vector<std::size_t> stage_starts;
  // Parameters that are one bucket each, whatever their size: those handed over as rows
  // (accumulate_rows: the tied table when its gradient is not deferred).
  std::vector<std::size_t> uncut;
  // The parameters that start each unit the partition shards (ZeRO 3: the position table, each block,
  // the final LayerNorm): every rank owns an equal share of each unit, so a unit's gather draws on every
  // rank alike. None: the whole space is one unit (ZeRO 1 and 2, as DeepSpeed's flat partitions).
  std::vector<std::size_t> unit_starts = {};
  // A pipeline rank: its steps are pipeline steps (accumulate_whole_step), whose buckets complete by
  // whole parameters (what memory_bound() counts).
  bool pipeline = false;
};

class DataParallelGradients final : public GradientSink {
 public:
  // Reductions in flight at once; launching one more first finishes the oldest (a fixed point, so a
  // dry run frees buffers where a real run does).
  static constexpr std::size_t kBucketsInFlight = 2;

  using BucketCuts = GradientBucketCuts;
  // `parameters`: the model's (or its part's) parameters; `zero_stage` 0, 1 or 2; `bucket_elements`:
  // DeepSpeed's reduce_bucket_size (0: one bucket).
  // `overlap` false (DeepSpeed's overlap_comm off): each bucket's reduction is waited for as soon as it
  // starts, so none of it hides behind backward.
  // `partition_off_device` (stage 2 only): the partition's averaged gradients are not kept on the
  // device; each landed piece goes to the sink set_partition_sink() names (ZeRO-Offload's host gradients).
  DataParallelGradients(Device& device, const std::vector<ParameterSpec>& parameters, Communicator& dp, int zero_stage,
                        std::int64_t bucket_elements, bool overlap = true, bool partition_off_device = false, const BucketCuts& cuts = {});
  // Where stage 2 with the partition off the device hands each landed piece: accumulate(owned index,
  // offset, piece), the owned index counting the parameters that have elements in owned() (in order)
  // and the offset within that parameter's owned part. Set before the first step.
  void set_partition_sink(GradientSink* sink) { partition_sink_ = sink; }
  ~DataParallelGradients() override;
  DataParallelGradients(const DataParallelGradients&) = delete;
  DataParallelGradients& operator=(const DataParallelGradients&) = delete;

  // The most this runtime holds at once, as a formula of its layout, each allocation rounded as the
  // allocator rounds it (bytes): gradients = the flat gradients of every parameter (stages 0, 1) or the
  // partition (stage 2, unless it is off the device) + buckets filling or in flight (stage 2) + a
  // parameter that is a bucket of its own (the held or uncut tied table); communication = the received
  // pieces in flight (stages 1, 2). Filling: with pieces that complete element by element, at most four
  // (one waiting for the parameter below the current one, one at the current one's completed prefix,
  // the next one a piece being added opens, one waiting for the parameter above); in a pipeline step,
  // whose buckets complete by whole parameters, every bucket of the largest parameter and the two
  // beside it. A dry run computes the same.
  struct MemoryBound {
    std::int64_t flat = 0;
    std::int64_t partition = 0;
    std::int64_t bucket = 0;        // one cut bucket, the largest
    std::int64_t buckets = 0;       // how many at once
    std::int64_t whole = 0;         // the held or uncut parameter's bucket
    std::int64_t received_piece = 0;
    std::int64_t received_pieces = 0;
    std::int64_t gradients() const { return flat + partition + buckets * bucket + whole; }
    std::int64_t communication() const { return received_pieces * received_piece; }
  };
  MemoryBound memory_bound() const;
  const FlatLayout& layout() const { return layout_; }
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  int zero_stage() const { return zero_stage_; }
  // This rank's share of the flat space: its shard of each unit (stages 1, 2) or everything (stage 0).
  const FlatShards& owned() const { return owned_; }

  // Zeroes the gradients (before a step's first micro-batch).
  void begin_step();
  // Before each micro-batch's backward: stages 0 and 1 reduce during the step's last one only.
  void begin_micro_batch(bool last);
  // A pipeline step, after begin_step(): a schedule interleaves the micro-batches' backwards, so none is
  // "the last". Stages 0 and 1 only accumulate; reduce_accumulated() then starts every bucket's
  // reduction at once, after the pipeline has summed the tied table into the accumulated sums. Stage 2
  // starts a bucket's reduction once each parameter it holds (a part of) has completed (in whichever
  // micro-batches), holds the `held` bucket whole, and reduce_accumulated() starts it and every bucket
  // still open.
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
  void piece_complete(std::size_t index, std::int64_t offset, std::int64_t count) override;
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
  // The buckets holding elements of flat range `range`, in increasing order.
  std::pair<std::size_t, std::size_t> buckets_over(const FlatRange& range) const;
  // Stage 2: bucket `bucket`'s buffer while it fills (made, zeroed, on first use).
  Tensor& open_bucket(std::size_t bucket);
  // Elements [from, to) of parameter `position` are complete this micro-batch: the buckets they finish start.
  void complete_elements(std::size_t position, std::int64_t from, std::int64_t to);
  void launch(std::size_t bucket);
  void land(InFlight& flight);  // the received piece into the owned gradients
  void land_oldest();

  Device& device_;
  Communicator& dp_;
  int zero_stage_;
  std::vector<std::optional<std::size_t>> positions_;  // [model index] -> position in the layout
  FlatLayout layout_;
  // The stream the buckets and received pieces are allocated on: buckets past the small pool's 1 MiB get
  // a pool of their own, so their churn of equal sizes never leaves holes among the activations (small
  // ones have the small pool already). cpu and meta: pools only; on a GPU the communication stream,
  // ordered against compute by events.
  Stream buffers_;
  std::vector<GradientBucket> buckets_;  // in increasing order of their ranges
  std::vector<std::int64_t> elements_pending_;  // [bucket] -> elements not yet complete this micro-batch
  std::vector<std::int64_t> complete_upto_;     // [position] -> its first elements complete this micro-batch
  std::vector<char> parameter_done_;            // [position] -> completed this micro-batch
  // Stage 2 in a pipeline step: [bucket] -> parameters not yet completed since it opened, and which have.
  std::vector<std::size_t> parameters_pending_;
  std::vector<std::vector<char>> completed_in_bucket_;
  std::optional<std::size_t> held_bucket_;  // stage 2: the `held` parameter's bucket
  std::vector<char> uncut_bucket_;          // [bucket] -> a parameter that is a bucket of its own
  bool pipeline_ = false;                   // BucketCuts::pipeline
  bool whole_step_ = false;              // between accumulate_whole_step() and reduce_accumulated()
  bool pipeline_step_ = false;           // since accumulate_whole_step(), until the next begin_step()
  FlatShards owned_;
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
