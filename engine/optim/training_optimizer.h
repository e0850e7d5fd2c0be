// The optimizer a training step drives, wherever its state lives: AdamW on the device beside the model
// (models/), or ZeRO-Offload's with fp32 state in pinned host memory or on NVMe (offload/). Checkpoints
// read and write either through the same host snapshot, so they move between modes.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/grid/flat_layout.h"
#include "models/gpt_model.h"
#include "models/kernels/cpu/adamw.h"
#include "offload/zero_offload_optimizer.h"

namespace ferry {

// The f32 master weights and moments of the model's parameters in host memory, parameters end to end
// in the model's order (HF names): all of them (a snapshot), or the flat elements `share` of them, end
// to end (a rank's shard, what it writes of a checkpoint: one range, or its shard of each unit).
struct OptimizerSnapshot {
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::int64_t> offsets;  // where each parameter starts
  FlatShards share;                   // the flat elements master holds, end to end
  std::vector<float> master, first_moment, second_moment;
  std::int64_t steps = 0;
};

// A snapshot of the model's names, shapes and offsets with zeroed values (steps = 0).
OptimizerSnapshot snapshot_layout(const GptModel& model);
// The same for a shard of flat elements `share`.
OptimizerSnapshot shard_layout(const GptModel& model, const FlatShards& share);
// Its names, shapes, offsets and share with no values (empty vectors).
OptimizerSnapshot shard_outline(const GptModel& model, const FlatShards& share);

// What a rank writes of a checkpoint, a piece at a time: `outline` (names, shapes, offsets, share and steps;
// no values) and `pieces(visit)`, which calls visit(first, count, master, first_moment, second_moment) with
// the values of elements [first, first + count) of the share (counted end to end), in order, covering it;
// each piece's values live only during its call. The offload optimizers give one sub-group at a time, so a
// checkpoint never holds a rank's whole state (12 bytes a parameter) on the host beside it.
using ShardPieceVisitor =
    std::function<void(std::int64_t first, std::int64_t count, const float* master, const float* first_moment, const float* second_moment)>;
struct ShardExport {
  OptimizerSnapshot outline;
  std::function<void(const ShardPieceVisitor&)> pieces;
};
// A snapshot held whole as one piece (it must outlive the export).
ShardExport export_of(const OptimizerSnapshot& snapshot);
// Pieces of at most kStatePieceElements (16 MiB of each of the three f32 arrays), each read into host
// buffers by read(first, count, master, first_moment, second_moment): how optimizers whose state lives on
// the device save it.
inline constexpr std::int64_t kStatePieceElements = std::int64_t{1} << 22;
using ShardPieceRead = std::function<void(std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment)>;
ShardExport export_in_pieces(OptimizerSnapshot outline, ShardPieceRead read);
// The converse for a restore: `fill` each piece of `elements` into host buffers, then `write` it where the
// state lives.
void import_in_pieces(std::int64_t elements, const ShardPieceRead& fill, const ShardPieceRead& write);
// Elements [first, first + count) of `shards` (end to end) as flat ranges.
FlatShards shards_window(const FlatShards& shards, std::int64_t first, std::int64_t count);
// Calls visit(tensor, element, count, at) for each tensor's part of elements [begin, begin + count) of
// outline.share (end to end): tensor `tensor`'s elements [element, element + count), at `at` of the window.
using TensorPieceVisitor = std::function<void(std::size_t tensor, std::int64_t element, std::int64_t count, std::int64_t at)>;
void for_each_tensor_piece(const OptimizerSnapshot& outline, std::int64_t begin, std::int64_t count, const TensorPieceVisitor& visit);
// The parameters' starting values, piece by piece without holding any whole tensor (`values(spec, offset,
// count)`: GPT-2's initialization from a seed, or an --init-from file's elements).
using ParameterValuesSource = std::function<std::vector<float>(const ParameterSpec& spec, std::int64_t offset, std::int64_t count)>;
// Elements [begin, begin + count) of flat elements `share` (counted end to end) of the starting values into
// `master`, each rounded to the parameters' dtype as a model holding them whole starts: the master weights
// a rank that holds only a partition of the parameters (ZeRO stage 3) starts its optimizer from.
void write_initial_values(const GptModel& model, const FlatShards& share, std::int64_t begin, std::int64_t count, float* master,
                          const ParameterValuesSource& values);
// Throws std::invalid_argument unless the snapshot holds the model's tensors.
void require_matching_snapshot(const OptimizerSnapshot& snapshot, const GptModel& model);

class TrainingOptimizer {
 public:
  virtual ~TrainingOptimizer() = default;
  virtual std::string mode() const = 0;  // "none", "cpu" or "nvme" (--offload-optimizer)
  // Before a step's first micro-batch: gradients to zero.
  virtual void begin_step() = 0;
  // Before each micro-batch's backward (data parallelism reduces during the step's last one), and once
  // after the step's last backward (waits for the gradients' reductions).
  virtual void begin_micro_batch(bool last) { (void)last; }
  virtual void end_backward() {}
  // A pipeline step (instead of begin_micro_batch): its schedule interleaves the micro-batches'
  // backwards, so gradients accumulate for the whole step and end_backward() reduces them.
  virtual void accumulate_whole_step() {}
  // The sum of squares (f64) of the step's gradients, leaving out the model's parameter `excluded`
  // (NamedTensor::index; a pipeline stage's duplicate of the tied token table) when given; inf or NaN
  // when a gradient is (an fp16 overflow, which loss scaling skips).
  virtual double unchecked_gradient_sum_of_squares(std::optional<std::size_t> excluded) = 0;
  // The same; throws when a gradient is inf or NaN.
  double gradient_sum_of_squares(std::optional<std::size_t> excluded);
  double gradient_norm() { return std::sqrt(gradient_sum_of_squares(std::nullopt)); }
  // Elements [start, start + values.size()) of the step's gradient (f32) of the model's parameter `index`,
  // read into `values` or written from them wherever the gradients live (the device's memory, a cuda
  // device's included; host memory under ZeRO-Offload), for sums between pipeline stages.
  virtual void read_gradient(std::size_t index, std::size_t start, std::span<float> values) = 0;
  virtual void write_gradient(std::size_t index, std::size_t start, std::span<const float> values) = 0;
  virtual void step(float learning_rate, float gradient_scale) = 0;
  virtual std::int64_t steps_taken() const = 0;
  virtual void set_steps_taken(std::int64_t steps) = 0;
  // The state this rank writes of a checkpoint, without communication: the whole state of a model (or
  // of a pipeline rank's part), or a data-parallel rank's partition (ZeRO 0: the one it would own).
  virtual OptimizerSnapshot shard() = 0;
  // The same a piece at a time (ShardExport); the default holds shard() whole.
  virtual ShardExport export_shard();
  // The flat elements of the model's parameters whose state this rank holds: all of them, or a
  // data-parallel rank's share (ZeRO 1, 2: its partition; ZeRO 3: its shard of each unit).
  virtual FlatShards state_range() const = 0;
  // Replaces the state of state_range() from `snapshot`, which must cover it (the whole state, or a
  // shard of that range); the model's parameters become the master weights rounded to their dtype (a
  // data-parallel rank gathers the other ranks' shares, so its whole dp group restores together).
  virtual void restore(const OptimizerSnapshot& snapshot) = 0;
  // Replaces the state of state_range() a piece at a time, as restore() does: fill(first, count, master,
  // first_moment, second_moment) writes elements [first, first + count) of the share (end to end) into the
  // buffers, pieces in order and covering it; then the optimizer stands at `steps`. The default fills a
  // whole snapshot (shard_layout) and restore()s it; the offload optimizers fill one sub-group at a time in
  // place, so a checkpoint's load never holds a rank's state twice on the host.
  using ShardPieceFill =
      std::function<void(std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment)>;
  virtual void restore_by_pieces(const GptModel& model, std::int64_t steps, const ShardPieceFill& fill);
  // Starts the state of state_range() from the parameters' starting values (write_initial_values) with zero
  // moments at step 0, through restore_by_pieces.
  void start_from(const GptModel& model, const ParameterValuesSource& values);
  // What the summary says about the optimizer (host memory, NVMe bytes, step phases).
  virtual nlohmann::json describe() const = 0;
};

// read_gradient and write_gradient on a gradient tensor (f32, contiguous) on any device.
void read_tensor_elements(const Tensor& tensor, std::size_t start, std::span<float> values);
void write_tensor_elements(const Tensor& tensor, std::size_t start, std::span<const float> values);

// The values of `shards`, end to end, from a snapshot that covers them (each range inside one of the
// snapshot's); throws std::invalid_argument when it does not.
struct SnapshotValues {
  std::vector<float> master, first_moment, second_moment;
};
SnapshotValues values_of(const OptimizerSnapshot& snapshot, const FlatShards& shards);
// Calls `import` with the values of `shards` (master, first moment, second moment): the snapshot's own
// vectors when it holds exactly those ranges (no copy: a rank's initial shard is 12 bytes a parameter,
// which ZeRO-Infinity keeps off the device because the host cannot hold it twice), else values_of's.
using SnapshotImport = std::function<void(const std::vector<float>&, const std::vector<float>&, const std::vector<float>&)>;
void import_values_of(const OptimizerSnapshot& snapshot, const FlatShards& shards, const SnapshotImport& import);

// AdamW on the model's device over its whole gradients.
std::unique_ptr<TrainingOptimizer> make_device_optimizer(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters);
// ZeRO-Offload over a model built with GradientStorage::streamed (it becomes the model's gradient sink).
std::unique_ptr<TrainingOptimizer> make_offload_optimizer(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters,
                                                          const offload::ZeroOffloadSettings& settings);
// For dry runs of offloaded training on meta: gradients are dropped, nothing is stepped.
std::unique_ptr<TrainingOptimizer> make_discarding_optimizer(GptModel& model);

}  // namespace ferry
