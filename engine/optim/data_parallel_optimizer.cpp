#include "engine/optim/data_parallel_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/size_rounding.h"
#include "engine/grid/data_parallel_gradients.h"
#include "engine/grid/parameter_gather.h"
#include "engine/grid/partitioned_adamw.h"
#include "engine/grid/partitioned_parameters.h"

namespace ferry {
namespace {

// The cuts of `settings` for `model`: at stage 2, a tied table handed over as computed (rows from the
// embedding, into a bucket's buffer) is a bucket of its own; stages 0 and 1 add rows into the flat buffer.
DataParallelGradients::BucketCuts cuts_for(const GptModel& model, const DataParallelSettings& settings) {
  DataParallelGradients::BucketCuts cuts = settings.cuts;
  if (settings.zero_stage >= 2 && settings.tied_table == TiedTableGradient::as_computed && model.part().embedding) {
    cuts.uncut.push_back(GptParameters::kWteIndex);
  }
  return cuts;
}

// What both variants share: the gradient sink on the model, the checks, the description.
class DataParallelBase : public TrainingOptimizer {
 public:
  // `partition_off_device`: stage 2's averaged partition goes to a sink (set by the subclass), not the device.
  DataParallelBase(GptModel& model, Communicator& dp, const DataParallelSettings& settings, bool partition_off_device = false)
      : model_(model), dp_(dp), settings_(settings),
        gradients_(model.device(), model.parameter_specs(), dp, std::min(settings.zero_stage, 2), settings.reduce_bucket_elements,
                   settings.overlap_comm, partition_off_device, cuts_for(model, settings)) {
    if (model.gradient_storage() != GradientStorage::streamed) {
      throw std::logic_error("data parallelism needs a model whose gradients stream to its sink (GradientStorage::streamed)");
    }
    if ((settings.zero_stage == 3) != (model.parameter_residence() == ParameterResidence::provided)) {
      throw std::logic_error("ZeRO stage 3, and only stage 3, runs a model whose parameters are provided layer by layer");
    }
    if (settings.tied_table == TiedTableGradient::deferred && !model.part().whole()) {
      throw std::logic_error("a deferred tied-table gradient needs the whole model on the rank (the embedding and the head)");
    }
    model_.set_gradient_sink(&gradients_);
    model_.set_tied_table_gradient(settings.tied_table);
  }
  ~DataParallelBase() override { model_.set_gradient_sink(nullptr); }
  DataParallelBase(const DataParallelBase&) = delete;
  DataParallelBase& operator=(const DataParallelBase&) = delete;

  void begin_micro_batch(bool last) override { gradients_.begin_micro_batch(last); }
  void accumulate_whole_step() override {
    gradients_.accumulate_whole_step();
    whole_step_ = true;
  }
  // A pipeline stage's accumulated gradient, before the step's reductions (the tied table's sum).
  void read_gradient(std::size_t index, std::size_t start, std::span<float> values) override {
    read_tensor_elements(accumulated_gradient(index), start, values);
  }
  void write_gradient(std::size_t index, std::size_t start, std::span<const float> values) override {
    write_tensor_elements(accumulated_gradient(index), start, values);
  }
  Tensor accumulated_gradient(std::size_t index) {
    if (!whole_step_) throw std::logic_error("a data-parallel rank's gradient is addressable only while a pipeline step accumulates");
    return gradients_.accumulated_gradient(index);
  }
  nlohmann::json describe() const override {
    nlohmann::json description = {{"zero_stage", settings_.zero_stage}, {"dp", dp_.size()},
                                  {"partition_elements", gradients_.layout().partition_size()}, {"owned_elements", gradients_.owned().size()},
                                  {"reduce_buckets", gradients_.buckets().size()}, {"memory_bound", memory_bound()}};
    description["last_step_seconds"]["gradient_reduction_wait"] = gradients_.wait_seconds();
    return description;
  }

 protected:
  // The most gradient and communication bytes this rank holds at once, as a formula of its plan: the
  // runtime's (DataParallelGradients::MemoryBound), the model's streamed pieces, and the all-gather's
  // bucket of updated parameters (after the reductions, so the larger of the two communication terms).
  nlohmann::json memory_bound() const {
    const AllocatorConfig& config = model_.device().allocator().config();
    const auto rounded = [&](std::int64_t bytes) {
      return bytes > 0 ? static_cast<std::int64_t>(round_size(static_cast<std::size_t>(bytes), config)) : std::int64_t{0};
    };
    const DataParallelGradients::MemoryBound runtime = gradients_.memory_bound();
    const GptModel::StreamedPieces pieces = model_.streamed_pieces();
    const std::int64_t model_pieces = pieces.at_once * rounded(pieces.largest * static_cast<std::int64_t>(sizeof(float)));
    const std::int64_t total = gradients_.layout().total();
    const std::int64_t gather_elements = settings_.allgather_bucket_elements > 0 ? std::min(settings_.allgather_bucket_elements, total) : total;
    const bool gathers_updates = settings_.zero_stage == 1 || settings_.zero_stage == 2;  // stage 3 steps its partition in place
    const std::int64_t gather =
        gathers_updates ? rounded(gather_elements * static_cast<std::int64_t>(dtype_size(model_.parameter_dtype()))) : 0;
    return {{"gradients",
             {{"flat", runtime.flat}, {"partition", runtime.partition}, {"bucket", runtime.bucket}, {"buckets", runtime.buckets},
              {"whole", runtime.whole}, {"model_pieces", model_pieces}, {"total", runtime.gradients() + model_pieces}}},
            {"communication",
             {{"received_piece", runtime.received_piece}, {"received_pieces", runtime.received_pieces}, {"allgather_bucket", gather},
              {"total", std::max(runtime.communication(), gather)}}}};
  }
  // The rank's share of the state (partitions are cut to the parameters: empty where padding only).
  FlatRange state_range() const override { return gradients_.owned(); }
  // The flat elements this rank writes of a checkpoint: its partition (ZeRO 0: the one it would own).
  FlatRange shard_range() const { return settings_.zero_stage > 0 ? gradients_.owned() : gradients_.layout().partition(dp_.rank()); }
  // The step's reductions: those a pipeline step held back start now; then every one is waited for.
  void finish_reductions() {
    if (whole_step_) gradients_.reduce_accumulated();
    whole_step_ = false;
    gradients_.finish_step();
  }
  GptModel& model_;
  Communicator& dp_;
  DataParallelSettings settings_;
  DataParallelGradients gradients_;
  bool whole_step_ = false;  // a pipeline step: the micro-batches accumulate, reductions wait for end_backward
};

// AdamW on the device over the rank's share (PartitionedAdamW).
class DataParallelAdamW final : public DataParallelBase {
 public:
  DataParallelAdamW(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters, Communicator& dp, const DataParallelSettings& settings)
      : DataParallelBase(model, dp, settings), provided_(provided_parameters(model, gradients_, dp, settings)),
        adam_(model.parameter_specs(),
              provided_ ? ParameterValues{{}, provided_->partition()} : ParameterValues{model.parameters().named(), Tensor()}, gradients_,
              dp, hyperparameters, settings.allgather_bucket_elements) {
    if (provided_) model.set_parameter_provider(provided_.get());
  }
  ~DataParallelAdamW() override {
    if (provided_) model_.set_parameter_provider(nullptr);
  }
  DataParallelAdamW(const DataParallelAdamW&) = delete;
  DataParallelAdamW& operator=(const DataParallelAdamW&) = delete;

  std::string mode() const override { return "none"; }
  void begin_step() override { gradients_.begin_step(); }
  void end_backward() override { finish_reductions(); }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t> excluded) override {
    return adam_.gradient_sum_of_squares(excluded);
  }
  void step(float learning_rate, float gradient_scale) override {
    if (provided_) provided_->release_all();  // a prefetch left over: its values are stale after the update
    adam_.step(learning_rate, gradient_scale);
  }
  std::int64_t steps_taken() const override { return adam_.steps_taken(); }
  void set_steps_taken(std::int64_t steps) override { adam_.set_steps_taken(steps); }
  OptimizerSnapshot shard() override {
    const FlatRange range = shard_range();
    OptimizerSnapshot shard = shard_layout(model_, range.begin, 0);
    shard.steps = adam_.steps_taken();
    adam_.export_range(range, shard.master, shard.first_moment, shard.second_moment);
    return shard;
  }
  void restore(const OptimizerSnapshot& snapshot) override {
    const SnapshotValues values = values_of(snapshot, state_range());
    if (provided_) provided_->release_all();
    adam_.import_share(values.master, values.first_moment, values.second_moment);
    adam_.set_steps_taken(snapshot.steps);
  }
  nlohmann::json describe() const override {
    nlohmann::json description = DataParallelBase::describe();
    description["mode"] = "none";
    description["state"] = "device";
    if (provided_) {
      description["memory_bound"]["parameters"] = parameter_bound();
      description["parameter_gathers"] = provided_->gathers();
    }
    return description;
  }

 private:
  // Stage 3: the provider of the model's parameters, over the gradients' partition.
  static std::unique_ptr<PartitionedParameters> provided_parameters(GptModel& model, const DataParallelGradients& gradients,
                                                                    Communicator& dp, const DataParallelSettings& settings) {
    if (settings.zero_stage != 3) return nullptr;
    return std::make_unique<PartitionedParameters>(model.device(), model.parameter_specs(), model.parameter_dtype(), gradients.layout(),
                                                   gradients.owned(), dp, settings.reshard_after_forward);
  }
  // Stage 3's parameter bytes as a formula of the plan: the partition, plus the most gathered at once.
  // Resharding after forward, a layer and the one prefetched: the embedding and block 0, two blocks, the
  // last block and the token table it prefetches for the head, the final LayerNorm and the table with the
  // last block prefetched for backward. Keeping blocks from forward to backward: every block with the
  // head's LayerNorm and table.
  nlohmann::json parameter_bound() const {
    const std::int64_t layers = model_.config().layers;
    const auto bytes = [&](const std::vector<std::size_t>& indices) { return provided_->gathered_bytes(indices); };
    const std::vector<std::size_t> embedding{GptParameters::kWteIndex, GptParameters::kWpeIndex}, table{GptParameters::kWteIndex};
    const std::vector<std::size_t> ln_f{GptParameters::block_index(layers), GptParameters::block_index(layers) + 1};
    std::vector<std::size_t> block(GptBlockParameters::kCount);
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = GptParameters::block_index(0) + i;
    const std::int64_t block_bytes = bytes(block), head = bytes(ln_f) + bytes(table);
    const std::int64_t gathered = provided_->reshard_after_forward()
                                      ? std::max({bytes(embedding) + block_bytes, layers > 1 ? 2 * block_bytes : 0, head + block_bytes})
                                      : std::max(bytes(embedding) + block_bytes, layers * block_bytes + head);
    const AllocatorConfig& config = model_.device().allocator().config();
    const auto partition = static_cast<std::int64_t>(round_size(provided_->partition().nbytes(), config));
    return {{"partition", partition}, {"block", block_bytes}, {"gathered", gathered}, {"total", partition + gathered},
            {"reshard_after_forward", provided_->reshard_after_forward()}};
  }

  std::unique_ptr<PartitionedParameters> provided_;
  PartitionedAdamW adam_;
};

// The rank's share of each parameter as flat views (they live as long as the optimizer).
std::vector<Tensor> owned_views(const GptModel& model, const DataParallelGradients& gradients) {
  const std::vector<NamedTensor> parameters = model.parameters().named();
  std::vector<Tensor> views;
  for (std::size_t position = 0; position < parameters.size(); ++position) {
    if (const auto piece = gradients.owned_piece(position)) views.push_back(flat_view(*parameters[position].tensor, piece->offset, piece->range.size()));
  }
  return views;
}

// The element counts of the rank's owned pieces (owned_views): the offloaded optimizer's parameters.
std::vector<std::int64_t> owned_numels(const GptModel& model, const DataParallelGradients& gradients) {
  std::vector<std::int64_t> numels;
  for (const Tensor& view : owned_views(model, gradients)) numels.push_back(view.numel());
  return numels;
}

// After backward at ZeRO 0 and 1: the rank's owned pieces of the averaged gradients to its host gradients.
void hand_owned_pieces(const DataParallelGradients& gradients, GradientSink& host) {
  std::size_t index = 0;
  for (std::size_t position = 0; position < gradients.layout().parameter_count(); ++position) {
    if (const auto piece = gradients.owned_piece(position)) host.accumulate(index++, 0, piece->gradient);
  }
}

// ZeRO-Offload per rank: after backward the rank's averaged gradients go to its host gradients, CpuAdam
// steps its share where the state lives, and the parameters are gathered from every rank.
class OffloadedDataParallelAdamW final : public DataParallelBase {
 public:
  OffloadedDataParallelAdamW(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters, Communicator& dp,
                             const DataParallelSettings& settings, const offload::ZeroOffloadSettings& offload)
      : DataParallelBase(model, dp, settings, settings.zero_stage == 2), views_(owned_views(model, gradients_)),
        optimizer_(model.device(), offloaded_views(model), hyperparameters, offload) {
    // Stage 2: each reduced piece of the partition goes straight to the host gradients, as ZeRO-Offload's
    // do; the device never holds the partition.
    if (settings.zero_stage == 2) gradients_.set_partition_sink(&optimizer_.gradients());
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
    gradients_.begin_step();
    optimizer_.begin_step();
  }
  void end_backward() override {
    finish_reductions();
    if (settings_.zero_stage != 2) hand_owned_pieces(gradients_, optimizer_.gradients());  // stage 2's went as they landed
  }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t> excluded) override {
    const offload::GradientCheck check = optimizer_.check_gradients(owned_index(excluded));
    double sum = check.finite ? check.sum_of_squares : std::nan("");
    if (settings_.zero_stage > 0) dp_.all_reduce(&sum, 1, CommDataType::f64, ReduceOperation::sum);
    return sum;
  }
  void step(float learning_rate, float gradient_scale) override {
    optimizer_.step(learning_rate, gradient_scale);
    if (settings_.zero_stage > 0) {
      gather_parameters(model_.parameters().named(), gradients_.layout(), gradients_.owned(), dp_, settings_.allgather_bucket_elements);
    }
  }
  std::int64_t steps_taken() const override { return optimizer_.steps_taken(); }
  void set_steps_taken(std::int64_t steps) override { optimizer_.set_steps_taken(steps); }
  OptimizerSnapshot shard() override {
    const FlatRange share = state_range(), range = shard_range();
    OptimizerSnapshot held = shard_layout(model_, share.begin, 0);  // the rank's share, then cut to the shard
    held.steps = optimizer_.steps_taken();
    optimizer_.export_state(held.master, held.first_moment, held.second_moment);
    SnapshotValues values = values_of(held, range);
    held.begin = range.begin;
    held.master = std::move(values.master);
    held.first_moment = std::move(values.first_moment);
    held.second_moment = std::move(values.second_moment);
    return held;
  }
  void restore(const OptimizerSnapshot& snapshot) override {
    const FlatRange share = state_range();
    const SnapshotValues values = values_of(snapshot, share);
    optimizer_.import_state(values.master, values.first_moment, values.second_moment);
    optimizer_.set_steps_taken(snapshot.steps);
    // The rank's pieces of the parameters from its master weights; the other ranks' pieces gathered.
    std::size_t index = 0;
    for (std::size_t position = 0; position < gradients_.layout().parameter_count(); ++position) {
      if (const auto piece = gradients_.owned_piece(position)) {
        copy_from_host_f32(views_[index++], values.master.data() + (piece->range.begin - share.begin));
      }
    }
    if (settings_.zero_stage > 0) {
      gather_parameters(model_.parameters().named(), gradients_.layout(), gradients_.owned(), dp_, settings_.allgather_bucket_elements);
    }
  }
  nlohmann::json describe() const override {
    nlohmann::json description = DataParallelBase::describe();
    description["mode"] = optimizer_.tier_name();
    description["state"] = optimizer_.tier_name() == "nvme" ? "nvme" : "host";
    description["host_pinned_peak"] = optimizer_.host_pinned_peak();
    description["nvme_bytes"] = optimizer_.nvme_bytes();
    description["gradient_bytes_to_host"] = optimizer_.gradients_received();
    const offload::OffloadStepTimes& times = optimizer_.last_step_times();
    description["cpu_adam"] = {{"simd", std::string(offload::simd_level_name(optimizer_.adam().simd()))}, {"threads", optimizer_.adam().threads()}};
    description["last_step_seconds"].update({{"step", times.step}, {"adam", times.adam}, {"read_wait", times.read_wait},
                                             {"write_wait", times.write_wait}, {"copy_back", times.copy_back}});
    return description;
  }

 private:
  std::vector<offload::OffloadedParameter> offloaded_views(const GptModel& model) const {
    const std::vector<NamedTensor> parameters = model.parameters().named();
    std::vector<offload::OffloadedParameter> result;
    std::size_t index = 0;
    for (std::size_t position = 0; position < parameters.size(); ++position) {
      if (gradients_.owned_piece(position)) result.push_back({parameters[position].name, &views_[index++], decays(*parameters[position].tensor)});
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
      : DataParallelBase(model, dp, settings, settings.zero_stage == 2), host_(model.device(), owned_numels(model, gradients_), nullptr) {
    if (settings.zero_stage == 2) gradients_.set_partition_sink(&host_);
  }
  std::string mode() const override { return "dry run"; }
  void begin_step() override {
    gradients_.begin_step();
    host_.zero();
  }
  void end_backward() override {
    finish_reductions();
    if (settings_.zero_stage != 2) hand_owned_pieces(gradients_, host_);
  }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t>) override {
    host_.complete_all();
    double sum = 0;
    if (settings_.zero_stage > 0) dp_.all_reduce(&sum, 1, CommDataType::f64, ReduceOperation::sum);
    return sum;
  }
  void step(float, float) override {
    host_.complete_all();
    ++steps_;
    if (settings_.zero_stage > 0) {
      gather_parameters(model_.parameters().named(), gradients_.layout(), gradients_.owned(), dp_, settings_.allgather_bucket_elements);
    }
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
  if (offload && settings.zero_stage == 3) {
    throw std::invalid_argument("--zero-stage 3 with --offload-optimizer is not built yet: use stage 3 alone (optimizer state partitioned "
                                "on the device), or stage 2 with --offload-optimizer");
  }
  if (offload && !model.device().has_storage()) return std::make_unique<DryRunOffloadedDataParallel>(model, dp, settings);
  if (offload) return std::make_unique<OffloadedDataParallelAdamW>(model, hyperparameters, dp, settings, *offload);
  return std::make_unique<DataParallelAdamW>(model, hyperparameters, dp, settings);
}

}  // namespace ferry
