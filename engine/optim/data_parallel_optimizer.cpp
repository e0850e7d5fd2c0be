#include "engine/optim/data_parallel_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/grid/data_parallel_gradients.h"
#include "engine/grid/partitioned_adamw.h"
#include "engine/optim/data_parallel_base.h"
#include "offload/host_gradients.h"

namespace ferry {
namespace {

// AdamW on the device over the rank's share (PartitionedAdamW).
class DataParallelAdamW final : public DataParallelBase {
 public:
  DataParallelAdamW(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters, Communicator& dp, const DataParallelSettings& settings)
      : DataParallelBase(model, dp, settings),
        adam_(model.device(), model.parameter_specs(), model.parameter_dtype(), owned_parameter_views(), gradients_, dp, hyperparameters) {}

  std::string mode() const override { return "none"; }
  void begin_step() override { begin_runtime_step(); }
  void end_backward() override { finish_reductions(); }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t> excluded) override {
    return adam_.gradient_sum_of_squares(excluded);
  }
  void step(float learning_rate, float gradient_scale) override {
    drop_gathered();
    adam_.step(learning_rate, gradient_scale);
    gather_updated_parameters();
  }
  std::int64_t steps_taken() const override { return adam_.steps_taken(); }
  void set_steps_taken(std::int64_t steps) override { adam_.set_steps_taken(steps); }
  OptimizerSnapshot shard() override {
    OptimizerSnapshot shard = shard_layout(model_, shard_range());
    shard.steps = adam_.steps_taken();
    adam_.export_shard(shard.share, shard.master, shard.first_moment, shard.second_moment);
    return shard;
  }
  // A piece of at most kStatePieceElements at a time through host buffers (the state lives on the device).
  ShardExport export_shard() override {
    OptimizerSnapshot outline = shard_outline(model_, shard_range());
    outline.steps = adam_.steps_taken();
    const FlatShards shard = outline.share;
    return export_in_pieces(std::move(outline), [this, shard](std::int64_t first, std::int64_t count, float* master, float* first_moment,
                                                              float* second_moment) {
      adam_.export_window(shards_window(shard, first, count), master, first_moment, second_moment);
    });
  }
  void restore_by_pieces(const GptModel& model, std::int64_t steps, const ShardPieceFill& fill) override {
    (void)model;
    const FlatShards share = state_range();
    drop_gathered();
    import_in_pieces(share.size(), fill, [&](std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment) {
      adam_.import_window(shards_window(share, first, count), master, first_moment, second_moment);
    });
    gather_updated_parameters();
    adam_.set_steps_taken(steps);
  }
  void restore(const OptimizerSnapshot& snapshot) override {
    import_values_of(snapshot, state_range(), [&](const std::vector<float>& master, const std::vector<float>& first, const std::vector<float>& second) {
      drop_gathered();  // once the snapshot is known to cover the share
      adam_.import_share(master, first, second);
    });
    gather_updated_parameters();
    adam_.set_steps_taken(snapshot.steps);
  }
  nlohmann::json describe() const override {
    nlohmann::json description = DataParallelBase::describe();
    description["mode"] = "none";
    description["state"] = "device";
    return description;
  }

 private:
  PartitionedAdamW adam_;
};

// ZeRO-Offload per rank: after backward the rank's averaged gradients go to its host gradients, CpuAdam
// steps its share where the state lives, and the parameters are gathered from every rank.
class OffloadedDataParallelAdamW final : public DataParallelBase {
 public:
  OffloadedDataParallelAdamW(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters, Communicator& dp,
                             const DataParallelSettings& settings, const offload::ZeroOffloadSettings& offload)
      : DataParallelBase(model, dp, settings, settings.zero_stage >= 2), views_(owned_parameter_views()),
        optimizer_(model.device(), offloaded_views(model), hyperparameters, offload, parameter_home()) {
    // Stages 2 and 3: each reduced piece of the partition goes straight to the host gradients, as
    // ZeRO-Offload's do; the device never holds the partition.
    if (settings.zero_stage >= 2) {
      gradients_.set_partition_sink(&optimizer_.gradients());
      sink_held_pieces_ = offload::HostGradients::kStagingSlots;
    }
  }

  std::string mode() const override { return optimizer_.tier_name(); }
  // The offloaded optimizer's index of model parameter `position` (its owned pieces, in order), or
  // nothing where this rank owns none of it.
  std::optional<std::size_t> owned_index(std::optional<std::size_t> position) const {
    if (!position || !gradients_.owned_piece(*position)) return std::nullopt;
    std::size_t index = 0;
    for (std::size_t before = 0; before < *position; ++before) index += gradients_.owned_piece(before) ? 1 : 0;
    return index;
  }
  void begin_step() override {
    begin_runtime_step();
    optimizer_.begin_step();
  }
  void end_backward() override {
    finish_reductions();
    if (settings_.zero_stage < 2) hand_owned_pieces(gradients_, optimizer_.gradients());  // stage 2's and 3's went as they landed
  }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t> excluded) override {
    const offload::GradientCheck check = optimizer_.check_gradients(owned_index(excluded));
    double sum = check.finite ? check.sum_of_squares : std::nan("");
    if (settings_.zero_stage > 0) dp_.all_reduce(&sum, 1, CommDataType::f64, ReduceOperation::sum);
    return sum;
  }
  void step(float learning_rate, float gradient_scale) override {
    drop_gathered();
    optimizer_.step(learning_rate, gradient_scale);
    gather_updated_parameters();
  }
  std::int64_t steps_taken() const override { return optimizer_.steps_taken(); }
  void set_steps_taken(std::int64_t steps) override { optimizer_.set_steps_taken(steps); }
  OptimizerSnapshot shard() override {
    const FlatShards range = shard_range();
    OptimizerSnapshot held = shard_layout(model_, state_range());  // the rank's share, then cut to the shard
    held.steps = optimizer_.steps_taken();
    optimizer_.export_state(held.master, held.first_moment, held.second_moment);
    if (range == held.share) return held;  // the shard is the whole share: no second copy
    SnapshotValues values = values_of(held, range);
    held.share = range;
    held.master = std::move(values.master);
    held.first_moment = std::move(values.first_moment);
    held.second_moment = std::move(values.second_moment);
    return held;
  }
  // A sub-group at a time when the shard is the rank's whole share (ZeRO 1-3); ZeRO 0's shard is a cut of it.
  ShardExport export_shard() override {
    if (!(shard_range() == state_range())) return TrainingOptimizer::export_shard();
    OptimizerSnapshot outline = shard_outline(model_, state_range());
    outline.steps = optimizer_.steps_taken();
    return {std::move(outline), [this](const ShardPieceVisitor& visit) { optimizer_.export_by_group(visit); }};
  }
  // A sub-group at a time: the host never holds the rank's whole share beside the optimizer's state.
  void restore_by_pieces(const GptModel& model, std::int64_t steps, const ShardPieceFill& fill) override {
    (void)model;
    drop_gathered();
    optimizer_.import_by_group(fill);
    optimizer_.set_steps_taken(steps);
    gather_updated_parameters();
  }
  void restore(const OptimizerSnapshot& snapshot) override {
    // The rank's pieces of the parameters from its master weights (import_state returns them where they
    // live); the other ranks' pieces gathered.
    import_values_of(snapshot, state_range(), [&](const std::vector<float>& master, const std::vector<float>& first, const std::vector<float>& second) {
      drop_gathered();
      optimizer_.import_state(master, first, second);
    });
    optimizer_.set_steps_taken(snapshot.steps);
    gather_updated_parameters();
  }
  nlohmann::json describe() const override {
    nlohmann::json description = DataParallelBase::describe();
    description["mode"] = optimizer_.tier_name();
    description["state"] = optimizer_.tier_name() == "nvme" ? "nvme" : "host";
    // The optimizer's pinned memory and the parameter home's (each with an allocator of its own).
    description["host_pinned_peak"] = optimizer_.host_pinned_peak() + (parameter_offload_ ? parameter_offload_->host_pinned_peak() : 0);
    description["nvme_bytes"] = optimizer_.nvme_bytes() + (parameter_offload_ ? parameter_offload_->home().nvme_bytes() : 0);
    description["gradient_bytes_to_host"] = optimizer_.gradients_received();
    const offload::OffloadStepTimes& times = optimizer_.last_step_times();
    description["cpu_adam"] = {{"simd", std::string(offload::simd_level_name(optimizer_.adam().simd()))}, {"threads", optimizer_.adam().threads()}};
    description["last_step_seconds"].update({{"step", times.step}, {"adam", times.adam}, {"read_wait", times.read_wait},
                                             {"write_wait", times.write_wait}, {"copy_back", times.copy_back}});
    return description;
  }

 private:
  std::vector<offload::OffloadedParameter> offloaded_views(const GptModel& model) const {
    const std::vector<ParameterSpec> parameters = model.parameter_specs();
    std::vector<offload::OffloadedParameter> result;
    std::size_t index = 0;
    for (std::size_t position = 0; position < parameters.size(); ++position) {
      const auto piece = gradients_.owned_piece(position);
      if (!piece) continue;
      // With a parameter home, only the element count: the parameters live there, not on the device.
      const Tensor* view = views_.empty() ? nullptr : &views_[index++];
      result.push_back({parameters[position].name, view, decays(parameters[position].shape), piece->range.size()});
    }
    return result;
  }
  std::vector<Tensor> views_;
  offload::ZeroOffloadOptimizer optimizer_;
};

// A dry run of ZeRO-Offload per rank on meta: the device's part only (the gradient sink, its buckets,
// the parameters' all-gather); the host gradients are meta's, holding each piece's device memory as long
// as a run's do and no values, read where OffloadedDataParallelAdamW reads them.
class DryRunOffloadedDataParallel final : public DataParallelBase {
 public:
  DryRunOffloadedDataParallel(GptModel& model, Communicator& dp, const DataParallelSettings& settings)
      : DataParallelBase(model, dp, settings, settings.zero_stage >= 2), host_(model.device(), owned_numels(), nullptr) {
    if (settings.zero_stage >= 2) {
      gradients_.set_partition_sink(&host_);
      sink_held_pieces_ = offload::HostGradients::kStagingSlots;
    }
  }
  std::string mode() const override { return "dry run"; }
  void begin_step() override {
    begin_runtime_step();
    host_.zero();
  }
  void end_backward() override {
    finish_reductions();
    if (settings_.zero_stage < 2) hand_owned_pieces(gradients_, host_);
  }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t>) override {
    host_.complete_all();
    double sum = 0;
    if (settings_.zero_stage > 0) dp_.all_reduce(&sum, 1, CommDataType::f64, ReduceOperation::sum);
    return sum;
  }
  void step(float, float) override {
    drop_gathered();
    host_.complete_all();
    ++steps_;
    gather_updated_parameters();
  }
  std::int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(std::int64_t steps) override { steps_ = steps; }
  OptimizerSnapshot shard() override { throw std::logic_error("a dry run has no optimizer state to save"); }
  void restore(const OptimizerSnapshot&) override { throw std::logic_error("a dry run has no optimizer state to load"); }
  nlohmann::json describe() const override {
    nlohmann::json description = DataParallelBase::describe();
    description["mode"] = "dry run";
    return description;
  }

 private:
  offload::HostGradients host_;
  std::int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<TrainingOptimizer> make_data_parallel_optimizer(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters,
                                                                Communicator& dp, const DataParallelSettings& settings,
                                                                const std::optional<offload::ZeroOffloadSettings>& offload) {
  if (offload && !model.device().has_storage()) return std::make_unique<DryRunOffloadedDataParallel>(model, dp, settings);
  if (offload) return std::make_unique<OffloadedDataParallelAdamW>(model, hyperparameters, dp, settings, *offload);
  return std::make_unique<DataParallelAdamW>(model, hyperparameters, dp, settings);
}

}  // namespace ferry
