#include "engine/optim/training_optimizer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "models/adamw_optimizer.h"
#include "offload/host_gradients.h"

namespace ferry {

namespace {

// Elements [start, start + count) of an f32 tensor as a one-dimensional view.
Tensor f32_elements(const Tensor& tensor, std::size_t start, std::size_t count, const char* what) {
  if (tensor.dtype() != DType::f32 || start + count > static_cast<std::size_t>(tensor.numel())) {
    throw std::logic_error(std::string(what) + ": [" + std::to_string(start) + ", " + std::to_string(start + count) + ") of a " +
                           std::string(dtype_name(tensor.dtype())) + " tensor of " + std::to_string(tensor.numel()));
  }
  if (count == 0) return tensor;  // nothing to move
  return tensor.reshape({tensor.numel()}).narrow(0, static_cast<std::int64_t>(start), static_cast<std::int64_t>(count));
}

}  // namespace

void read_tensor_elements(const Tensor& tensor, std::size_t start, std::span<float> values) {
  const Tensor elements = f32_elements(tensor, start, values.size(), "read_tensor_elements");
  if (!values.empty()) elements.copy_to_host(values.data());
}

void write_tensor_elements(const Tensor& tensor, std::size_t start, std::span<const float> values) {
  const Tensor elements = f32_elements(tensor, start, values.size(), "write_tensor_elements");
  if (!values.empty()) elements.copy_from_host(values.data());
}

double TrainingOptimizer::gradient_sum_of_squares(std::optional<std::size_t> excluded) {
  const double sum = unchecked_gradient_sum_of_squares(excluded);
  if (!std::isfinite(sum)) {
    throw std::runtime_error("a gradient became inf or NaN; lower --lr or enable --grad-clip (the optimizer state was not updated)");
  }
  return sum;
}

OptimizerSnapshot shard_layout(const GptModel& model, const FlatShards& share) {
  OptimizerSnapshot snapshot = shard_outline(model, share);
  snapshot.master.resize(static_cast<std::size_t>(share.size()));
  snapshot.first_moment.resize(static_cast<std::size_t>(share.size()));
  snapshot.second_moment.resize(static_cast<std::size_t>(share.size()));
  return snapshot;
}

ShardExport export_of(const OptimizerSnapshot& snapshot) {
  OptimizerSnapshot outline;
  outline.names = snapshot.names;
  outline.shapes = snapshot.shapes;
  outline.offsets = snapshot.offsets;
  outline.share = snapshot.share;
  outline.steps = snapshot.steps;
  return {std::move(outline), [&snapshot](const ShardPieceVisitor& visit) {
            visit(0, snapshot.share.size(), snapshot.master.data(), snapshot.first_moment.data(), snapshot.second_moment.data());
          }};
}

namespace {

// work(first, count, master, first_moment, second_moment) for pieces of at most kStatePieceElements of
// `elements`, in order, with host buffers of that size.
void for_each_state_piece(std::int64_t elements, const ShardPieceRead& work) {
  const auto piece = static_cast<std::size_t>(std::min(elements, kStatePieceElements));
  std::vector<float> master(piece), first_moment(piece), second_moment(piece);
  for (std::int64_t first = 0; first < elements; first += kStatePieceElements) {
    work(first, std::min(kStatePieceElements, elements - first), master.data(), first_moment.data(), second_moment.data());
  }
}

}  // namespace

ShardExport export_in_pieces(OptimizerSnapshot outline, ShardPieceRead read) {
  const std::int64_t elements = outline.share.size();
  return {std::move(outline), [elements, read = std::move(read)](const ShardPieceVisitor& visit) {
            for_each_state_piece(elements, [&](std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment) {
              read(first, count, master, first_moment, second_moment);
              visit(first, count, master, first_moment, second_moment);
            });
          }};
}

void import_in_pieces(std::int64_t elements, const ShardPieceRead& fill, const ShardPieceRead& write) {
  for_each_state_piece(elements, [&](std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment) {
    fill(first, count, master, first_moment, second_moment);
    write(first, count, master, first_moment, second_moment);
  });
}

FlatShards shards_window(const FlatShards& shards, std::int64_t first, std::int64_t count) {
  std::vector<FlatRange> ranges;
  std::int64_t start = 0;  // the range's first element in the concatenation
  for (const FlatRange& range : shards.ranges()) {
    const std::int64_t from = std::max(first, start), to = std::min(first + count, start + range.size());
    if (from < to) ranges.push_back({range.begin + (from - start), range.begin + (to - start)});
    start += range.size();
  }
  return FlatShards(std::move(ranges));
}

ShardExport TrainingOptimizer::export_shard() {
  auto held = std::make_shared<const OptimizerSnapshot>(shard());
  ShardExport exported = export_of(*held);
  exported.pieces = [held, pieces = std::move(exported.pieces)](const ShardPieceVisitor& visit) { pieces(visit); };
  return exported;
}

OptimizerSnapshot shard_outline(const GptModel& model, const FlatShards& share) {
  OptimizerSnapshot snapshot;
  std::int64_t offset = 0;
  for (const ParameterSpec& each : model.parameter_specs()) {  // held or not (ZeRO stage 3 holds a partition)
    snapshot.names.push_back(each.name);
    snapshot.shapes.push_back(each.shape);
    snapshot.offsets.push_back(offset);
    offset += each.numel();
  }
  for (const FlatRange& range : share.ranges()) {
    if (range.begin < 0 || range.end > offset) {
      throw std::invalid_argument("an optimizer shard [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                  ") outside the model's " + std::to_string(offset) + " elements");
    }
  }
  snapshot.share = share;
  return snapshot;
}

OptimizerSnapshot snapshot_layout(const GptModel& model) {
  std::int64_t elements = 0;
  for (const ParameterSpec& each : model.parameter_specs()) elements += each.numel();
  return shard_layout(model, FlatRange{0, elements});
}

void for_each_tensor_piece(const OptimizerSnapshot& outline, std::int64_t begin, std::int64_t count, const TensorPieceVisitor& visit) {
  std::int64_t share_start = 0;  // where each of the share's ranges starts in its elements, end to end
  for (const FlatRange& range : outline.share.ranges()) {
    // The part of this range that lands in [begin, begin + count) of the share.
    const std::int64_t first = std::max(begin, share_start), last = std::min(begin + count, share_start + range.size());
    if (first < last) {
      const FlatRange wanted{range.begin + (first - share_start), range.begin + (last - share_start)};
      for (std::size_t i = 0; i < outline.names.size(); ++i) {
        const FlatRange tensor{outline.offsets[i], outline.offsets[i] + shape_numel(outline.shapes[i])};
        const FlatRange piece = tensor.intersect(wanted);
        if (!piece.empty()) visit(i, piece.begin - tensor.begin, piece.size(), (share_start + piece.begin - range.begin) - begin);
      }
    }
    share_start += range.size();
  }
}

void write_initial_values(const GptModel& model, const FlatShards& share, std::int64_t begin, std::int64_t count, float* master,
                          const ParameterValuesSource& source) {
  const std::vector<ParameterSpec> specs = model.parameter_specs();
  const OptimizerSnapshot outline = shard_outline(model, share);
  for_each_tensor_piece(outline, begin, count, [&](std::size_t tensor, std::int64_t element, std::int64_t elements, std::int64_t at) {
    std::vector<float> values = source(specs[tensor], element, elements);
    // 16-bit parameters start as the values rounded to their dtype, and so does their master copy (as a
    // model that holds its parameters whole starts).
    if (model.parameter_dtype() != DType::f32) {
      std::vector<std::uint16_t> rounded(values.size());
      convert_from_f32(values.data(), rounded.data(), model.parameter_dtype(), values.size());
      convert_to_f32(rounded.data(), values.data(), model.parameter_dtype(), values.size());
    }
    std::copy(values.begin(), values.end(), master + at);
  });
}

void TrainingOptimizer::restore_by_pieces(const GptModel& model, std::int64_t steps, const ShardPieceFill& fill) {
  OptimizerSnapshot snapshot = shard_layout(model, state_range());
  fill(0, snapshot.share.size(), snapshot.master.data(), snapshot.first_moment.data(), snapshot.second_moment.data());
  snapshot.steps = steps;
  restore(snapshot);
}

void TrainingOptimizer::start_from(const GptModel& model, const ParameterValuesSource& values) {
  const FlatShards share = state_range();
  restore_by_pieces(model, 0, [&](std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment) {
    write_initial_values(model, share, first, count, master, values);
    std::fill_n(first_moment, count, 0.0f);
    std::fill_n(second_moment, count, 0.0f);
  });
}

SnapshotValues values_of(const OptimizerSnapshot& snapshot, const FlatShards& shards) {
  SnapshotValues values;
  for (const FlatRange& range : shards.ranges()) {
    if (!snapshot.share.holds(range)) {
      const std::vector<FlatRange>& held = snapshot.share.ranges();
      throw std::invalid_argument("optimizer state of flat elements [" + std::to_string(held.empty() ? 0 : held.front().begin) + ", " +
                                  std::to_string(held.empty() ? 0 : held.back().end) + ") in " + std::to_string(held.size()) +
                                  " range(s) does not cover [" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ")");
    }
    const auto skip = static_cast<std::size_t>(snapshot.share.offset(range.begin)), count = static_cast<std::size_t>(range.size());
    auto append = [&](std::vector<float>& to, const std::vector<float>& from) { to.insert(to.end(), from.begin() + skip, from.begin() + skip + count); };
    append(values.master, snapshot.master);
    append(values.first_moment, snapshot.first_moment);
    append(values.second_moment, snapshot.second_moment);
  }
  return values;
}

void import_values_of(const OptimizerSnapshot& snapshot, const FlatShards& shards, const SnapshotImport& import) {
  if (snapshot.share == shards) {
    import(snapshot.master, snapshot.first_moment, snapshot.second_moment);
    return;
  }
  const SnapshotValues values = values_of(snapshot, shards);
  import(values.master, values.first_moment, values.second_moment);
}

void require_matching_snapshot(const OptimizerSnapshot& snapshot, const GptModel& model) {
  const std::vector<ParameterSpec> parameters = model.parameter_specs();
  std::int64_t elements = 0;
  for (const ParameterSpec& each : parameters) elements += each.numel();
  if (snapshot.names.size() != parameters.size() || snapshot.master.size() != static_cast<std::size_t>(elements)) {
    throw std::invalid_argument("optimizer state for " + std::to_string(snapshot.names.size()) + " tensors does not match the model's " +
                                std::to_string(parameters.size()));
  }
}

namespace {

OptimizerSnapshot empty_snapshot(const GptModel& model, std::int64_t steps) {
  OptimizerSnapshot snapshot = snapshot_layout(model);
  snapshot.steps = steps;
  return snapshot;
}

class DeviceAdamW final : public TrainingOptimizer {
 public:
  DeviceAdamW(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters)
      : model_(model), optimizer_(model.parameters(), model.gradients(), hyperparameters) {}
  std::string mode() const override { return "none"; }
  void begin_step() override { model_.zero_gradients(); }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t> excluded) override {
    return optimizer_.gradient_sum_of_squares(excluded);
  }
  void read_gradient(std::size_t index, std::size_t start, std::span<float> values) override {
    read_tensor_elements(optimizer_.gradient_of(index), start, values);
  }
  void write_gradient(std::size_t index, std::size_t start, std::span<const float> values) override {
    write_tensor_elements(optimizer_.gradient_of(index), start, values);
  }
  void step(float learning_rate, float gradient_scale) override { optimizer_.step(learning_rate, gradient_scale); }
  std::int64_t steps_taken() const override { return optimizer_.steps_taken(); }
  void set_steps_taken(std::int64_t steps) override { optimizer_.set_steps_taken(steps); }

  OptimizerSnapshot shard() override {
    OptimizerSnapshot snapshot = empty_snapshot(model_, optimizer_.steps_taken());
    const std::vector<NamedTensor> masters = optimizer_.master_weights();
    for (std::size_t i = 0; i < masters.size(); ++i) {
      const auto at = static_cast<std::size_t>(snapshot.offsets[i]);
      masters[i].tensor->copy_to_host(snapshot.master.data() + at);
      optimizer_.states()[i].first_moment.copy_to_host(snapshot.first_moment.data() + at);
      optimizer_.states()[i].second_moment.copy_to_host(snapshot.second_moment.data() + at);
    }
    return snapshot;
  }

  // A piece of at most kStatePieceElements at a time through host buffers (the state lives on the device).
  ShardExport export_shard() override {
    OptimizerSnapshot outline = shard_outline(model_, state_range());
    outline.steps = optimizer_.steps_taken();
    const OptimizerSnapshot layout = outline;  // names, shapes, offsets (no values) for the reads
    return export_in_pieces(std::move(outline), [this, layout](std::int64_t first, std::int64_t count, float* master, float* first_moment,
                                                               float* second_moment) {
      const std::vector<NamedTensor> masters = optimizer_.master_weights();
      for_each_tensor_piece(layout, first, count, [&](std::size_t tensor, std::int64_t element, std::int64_t elements, std::int64_t at) {
        const auto start = static_cast<std::size_t>(element), size = static_cast<std::size_t>(elements);
        read_tensor_elements(*masters[tensor].tensor, start, {master + at, size});
        read_tensor_elements(optimizer_.states()[tensor].first_moment, start, {first_moment + at, size});
        read_tensor_elements(optimizer_.states()[tensor].second_moment, start, {second_moment + at, size});
      });
    });
  }
  void restore_by_pieces(const GptModel& model, std::int64_t steps, const ShardPieceFill& fill) override {
    const OptimizerSnapshot layout = shard_outline(model, state_range());
    const std::vector<NamedTensor> masters = optimizer_.master_weights();
    const std::vector<NamedTensor> parameters = model_.parameters().named();
    import_in_pieces(layout.share.size(), fill, [&](std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment) {
      for_each_tensor_piece(layout, first, count, [&](std::size_t tensor, std::int64_t element, std::int64_t elements, std::int64_t at) {
        const auto start = static_cast<std::size_t>(element), size = static_cast<std::size_t>(elements);
        write_tensor_elements(*masters[tensor].tensor, start, {master + at, size});
        write_tensor_elements(optimizer_.states()[tensor].first_moment, start, {first_moment + at, size});
        write_tensor_elements(optimizer_.states()[tensor].second_moment, start, {second_moment + at, size});
        // bf16 parameters are the rounded master weights, exactly as after the step that saved them.
        const Tensor& parameter = *parameters[tensor].tensor;
        if (parameter.dtype() != DType::f32) copy_from_host_f32(parameter.reshape({parameter.numel()}).narrow(0, element, elements), master + at);
      });
    });
    optimizer_.set_steps_taken(steps);
  }

  FlatShards state_range() const override { return FlatRange{0, model_.parameters().numel()}; }
  void restore(const OptimizerSnapshot& snapshot) override {
    require_matching_snapshot(snapshot, model_);
    const std::vector<NamedTensor> masters = optimizer_.master_weights();
    const std::vector<NamedTensor> parameters = model_.parameters().named();
    for (std::size_t i = 0; i < masters.size(); ++i) {
      const auto at = static_cast<std::size_t>(snapshot.offsets[i]);
      masters[i].tensor->copy_from_host(snapshot.master.data() + at);
      optimizer_.states()[i].first_moment.copy_from_host(snapshot.first_moment.data() + at);
      optimizer_.states()[i].second_moment.copy_from_host(snapshot.second_moment.data() + at);
      // bf16 parameters are the rounded master weights, exactly as after the step that saved them.
      if (parameters[i].tensor->dtype() != DType::f32) copy_from_host_f32(*parameters[i].tensor, snapshot.master.data() + at);
    }
    optimizer_.set_steps_taken(snapshot.steps);
  }

  nlohmann::json describe() const override { return {{"mode", "none"}, {"state", "device"}}; }

 private:
  GptModel& model_;
  AdamWOptimizer optimizer_;
};

std::vector<offload::OffloadedParameter> offloaded_parameters(const GptModel& model) {
  std::vector<offload::OffloadedParameter> parameters;
  for (const NamedTensor& each : model.parameters().named()) parameters.push_back({each.name, each.tensor, decays(*each.tensor)});
  return parameters;
}

// Hands the optimizer's gradient list the gradients of a model (or of a pipeline stage's part of one)
// under their positions in that list; the model names them by their whole-model index.
class PartGradientSink final : public GradientSink {
 public:
  PartGradientSink(GradientSink& target, const std::vector<NamedTensor>& parameters) : target_(target) {
    for (std::size_t position = 0; position < parameters.size(); ++position) {
      const std::size_t index = parameters[position].index;
      if (positions_.size() <= index) positions_.resize(index + 1);
      positions_[index] = position;
    }
  }
  std::optional<std::size_t> position_of(std::size_t index) const { return index < positions_.size() ? positions_[index] : std::nullopt; }
  void accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) override {
    target_.accumulate(required(index), offset, gradient);
  }
  void accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) override {
    target_.accumulate_rows(required(index), ids, rows);
  }

 private:
  std::size_t required(std::size_t index) const {
    const std::optional<std::size_t> position = position_of(index);
    if (!position) throw std::logic_error("a gradient of parameter " + std::to_string(index) + ", which this model part does not hold");
    return *position;
  }
  GradientSink& target_;
  std::vector<std::optional<std::size_t>> positions_;  // [whole-model index] -> position in the list
};

class OffloadedAdamW final : public TrainingOptimizer {
 public:
  OffloadedAdamW(GptModel& model, const cpu::AdamWHyperparameters& h, const offload::ZeroOffloadSettings& settings)
      : model_(model),
        optimizer_(model.device(), offloaded_parameters(model), h, settings),
        sink_(optimizer_.gradients(), model.parameters().named()) {
    if (model.gradient_storage() != GradientStorage::streamed) {
      throw std::logic_error("ZeRO-Offload needs a model whose gradients stream to the host (GradientStorage::streamed)");
    }
    model_.set_gradient_sink(&sink_);
  }
  ~OffloadedAdamW() override { model_.set_gradient_sink(nullptr); }
  OffloadedAdamW(const OffloadedAdamW&) = delete;
  OffloadedAdamW& operator=(const OffloadedAdamW&) = delete;

  std::string mode() const override { return optimizer_.tier_name(); }
  void begin_step() override { optimizer_.begin_step(); }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t> excluded) override {
    std::optional<std::size_t> position;
    if (excluded) position = sink_.position_of(*excluded);
    const offload::GradientCheck check = optimizer_.check_gradients(position);
    return check.finite ? check.sum_of_squares : std::nan("");
  }
  void read_gradient(std::size_t index, std::size_t start, std::span<float> values) override {
    const std::span<float> gradient = host_gradient(index);
    std::copy_n(gradient.subspan(start, values.size()).begin(), values.size(), values.begin());
  }
  void write_gradient(std::size_t index, std::size_t start, std::span<const float> values) override {
    std::copy(values.begin(), values.end(), host_gradient(index).subspan(start, values.size()).begin());
  }
  void step(float learning_rate, float gradient_scale) override { optimizer_.step(learning_rate, gradient_scale); }
  std::int64_t steps_taken() const override { return optimizer_.steps_taken(); }
  void set_steps_taken(std::int64_t steps) override { optimizer_.set_steps_taken(steps); }

  OptimizerSnapshot shard() override {
    OptimizerSnapshot snapshot = empty_snapshot(model_, optimizer_.steps_taken());
    optimizer_.export_state(snapshot.master, snapshot.first_moment, snapshot.second_moment);
    return snapshot;
  }
  ShardExport export_shard() override {
    OptimizerSnapshot outline = shard_outline(model_, state_range());
    outline.steps = optimizer_.steps_taken();
    return {std::move(outline), [this](const ShardPieceVisitor& visit) { optimizer_.export_by_group(visit); }};
  }
  void restore_by_pieces(const GptModel& model, std::int64_t steps, const ShardPieceFill& fill) override {
    (void)model;
    optimizer_.import_by_group(fill);
    optimizer_.set_steps_taken(steps);
  }
  FlatShards state_range() const override { return FlatRange{0, model_.parameters().numel()}; }
  void restore(const OptimizerSnapshot& snapshot) override {
    require_matching_snapshot(snapshot, model_);
    optimizer_.import_state(snapshot.master, snapshot.first_moment, snapshot.second_moment);
    optimizer_.set_steps_taken(snapshot.steps);
  }

  nlohmann::json describe() const override {
    const offload::OffloadStepTimes& times = optimizer_.last_step_times();
    return {{"mode", optimizer_.tier_name()},
            {"state", optimizer_.tier_name() == "nvme" ? "nvme" : "host"},
            {"sub_group_elements", optimizer_.sub_group_elements()},
            {"host_pinned_peak", optimizer_.host_pinned_peak()},
            {"nvme_bytes", optimizer_.nvme_bytes()},
            {"gradient_bytes_to_host", optimizer_.gradients_received()},
            {"cpu_adam", {{"simd", std::string(offload::simd_level_name(optimizer_.adam().simd()))}, {"threads", optimizer_.adam().threads()}}},
            {"last_step_seconds",
             {{"step", times.step}, {"adam", times.adam}, {"read_wait", times.read_wait}, {"write_wait", times.write_wait},
              {"copy_back", times.copy_back}}}};
  }

 private:
  std::span<float> host_gradient(std::size_t index) {
    const std::optional<std::size_t> position = sink_.position_of(index);
    if (!position) throw std::out_of_range("the optimizer holds no gradient of parameter " + std::to_string(index));
    return optimizer_.gradients().of(*position);
  }
  GptModel& model_;
  offload::ZeroOffloadOptimizer optimizer_;
  PartGradientSink sink_;
};

// ZeRO-Offload's dry run on meta: the gradient buckets go to host gradients on the meta device, which
// hold each bucket's device memory as long as a run's do (their staging slots) and keep no values; they
// are read where OffloadedAdamW reads them (zeroed at the step's start, complete at the gradient check
// and at the step). A dry run measures the device's allocations, not values.
class DiscardingOptimizer final : public TrainingOptimizer {
 public:
  explicit DiscardingOptimizer(GptModel& model)
      : model_(model),
        gradients_(model.device(), offload::numels_of(offloaded_parameters(model)), nullptr),
        sink_(gradients_, model.parameters().named()) {
    model_.set_gradient_sink(&sink_);
  }
  ~DiscardingOptimizer() override { model_.set_gradient_sink(nullptr); }
  DiscardingOptimizer(const DiscardingOptimizer&) = delete;
  DiscardingOptimizer& operator=(const DiscardingOptimizer&) = delete;
  std::string mode() const override { return "dry run"; }
  void begin_step() override { gradients_.zero(); }
  double unchecked_gradient_sum_of_squares(std::optional<std::size_t>) override {
    gradients_.complete_all();
    return 0.0;
  }
  void read_gradient(std::size_t, std::size_t, std::span<float>) override { throw std::logic_error("a dry run holds no gradients"); }
  void write_gradient(std::size_t, std::size_t, std::span<const float>) override { throw std::logic_error("a dry run holds no gradients"); }
  void step(float, float) override {
    gradients_.complete_all();
    ++steps_;
  }
  std::int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(std::int64_t steps) override { steps_ = steps; }
  OptimizerSnapshot shard() override { throw std::logic_error("a dry run has no optimizer state to save"); }
  FlatShards state_range() const override { return FlatRange{0, model_.parameters().numel()}; }
  void restore(const OptimizerSnapshot&) override { throw std::logic_error("a dry run has no optimizer state to load"); }
  nlohmann::json describe() const override { return {{"mode", "dry run"}}; }

 private:
  GptModel& model_;
  offload::HostGradients gradients_;
  PartGradientSink sink_;
  std::int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<TrainingOptimizer> make_device_optimizer(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters) {
  return std::make_unique<DeviceAdamW>(model, hyperparameters);
}

std::unique_ptr<TrainingOptimizer> make_offload_optimizer(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters,
                                                          const offload::ZeroOffloadSettings& settings) {
  return std::make_unique<OffloadedAdamW>(model, hyperparameters, settings);
}

std::unique_ptr<TrainingOptimizer> make_discarding_optimizer(GptModel& model) { return std::make_unique<DiscardingOptimizer>(model); }

}  // namespace ferry
