#include "engine/optim/data_parallel_base.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "allocator/size_rounding.h"
#include "engine/grid/parameter_gather.h"

namespace ferry {
namespace {

// The cuts of `settings` for `model`: at stage 2, a tied table handed over as computed (rows from the
// embedding, into a bucket's buffer) is a bucket of its own; stages 0 and 1 add rows into the flat buffer.
// Stage 3 shards each layer's parameters across the ranks as a unit (the token table, the position
// table, each block, the final LayerNorm), so a layer's gather takes an equal share from every rank.
DataParallelGradients::BucketCuts cuts_for(const GptModel& model, const DataParallelSettings& settings) {
  DataParallelGradients::BucketCuts cuts = settings.cuts;
  if (settings.zero_stage >= 2 && settings.tied_table == TiedTableGradient::as_computed && model.part().embedding) {
    cuts.uncut.push_back(GptParameters::kWteIndex);
  }
  if (settings.zero_stage == 3) {
    const std::int64_t layers = model.config().layers;
    cuts.unit_starts.push_back(GptParameters::kWpeIndex);
    for (std::int64_t layer = 0; layer <= layers; ++layer) cuts.unit_starts.push_back(GptParameters::block_index(layer));  // layers: ln_f
  }
  return cuts;
}

// Stage 3 with parameter offload: the partition's home.
std::unique_ptr<offload::ParameterOffload> offloaded_partition(GptModel& model, const DataParallelGradients& gradients,
                                                               const DataParallelSettings& settings) {
  if (!settings.offload_param) return nullptr;
  if (settings.zero_stage != 3) throw std::logic_error("parameter offload needs ZeRO stage 3 (a partition of the parameters to offload)");
  return std::make_unique<offload::ParameterOffload>(model.device(), gradients.owned().size(), model.parameter_dtype(), *settings.offload_param);
}

// Stage 3: the provider of the model's parameters, over the gradients' partition.
std::unique_ptr<PartitionedParameters> provided_parameters(GptModel& model, const DataParallelGradients& gradients, Communicator& dp,
                                                           const DataParallelSettings& settings, offload::ParameterOffload* offloaded) {
  if (settings.zero_stage != 3) return nullptr;
  return std::make_unique<PartitionedParameters>(model.device(), model.parameter_specs(), model.parameter_dtype(), gradients.layout(),
                                                 gradients.owned(), dp, settings.gather,
                                                 offloaded != nullptr ? &offloaded->home() : nullptr);
}

}  // namespace

DataParallelBase::DataParallelBase(GptModel& model, Communicator& dp, const DataParallelSettings& settings, bool partition_off_device)
    : model_(model), dp_(dp), settings_(settings),
      gradients_(model.device(), model.parameter_specs(), dp, std::min(settings.zero_stage, 2), settings.reduce_bucket_elements,
                 settings.overlap_comm, partition_off_device, cuts_for(model, settings)),
      parameter_offload_(offloaded_partition(model, gradients_, settings)),
      provided_(provided_parameters(model, gradients_, dp, settings, parameter_offload_.get())) {
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
  if (provided_) model_.set_parameter_provider(provided_.get());
}

DataParallelBase::~DataParallelBase() {
  model_.set_gradient_sink(nullptr);
  if (provided_) model_.set_parameter_provider(nullptr);
}

void DataParallelBase::read_gradient(std::size_t index, std::size_t start, std::span<float> values) {
  read_tensor_elements(accumulated_gradient(index), start, values);
}

void DataParallelBase::write_gradient(std::size_t index, std::size_t start, std::span<const float> values) {
  write_tensor_elements(accumulated_gradient(index), start, values);
}

Tensor DataParallelBase::accumulated_gradient(std::size_t index) {
  if (!whole_step_) throw std::logic_error("a data-parallel rank's gradient is addressable only while a pipeline step accumulates");
  return gradients_.accumulated_gradient(index);
}

nlohmann::json DataParallelBase::describe() const {
  nlohmann::json description = {{"zero_stage", settings_.zero_stage}, {"dp", dp_.size()},
                                {"partition_elements", gradients_.layout().partition_size()},
                                {"partition_units", gradients_.layout().unit_count()}, {"owned_elements", gradients_.owned().size()},
                                {"reduce_buckets", gradients_.buckets().size()}, {"memory_bound", memory_bound()}};
  description["last_step_seconds"]["gradient_reduction_wait"] = gradients_.wait_seconds();
  if (parameter_offload_) {
    const ParameterHome& home = parameter_offload_->home();
    description["parameter_offload"] = {{"device", home.name()}, {"partition_bytes", home.elements() * static_cast<std::int64_t>(dtype_size(home.dtype()))},
                                        {"host_bytes", home.host_bytes()}, {"host_pinned_peak", parameter_offload_->host_pinned_peak()},
                                        {"nvme_bytes", home.nvme_bytes()}, {"nvme_bytes_read", home.bytes_read()},
                                        {"nvme_bytes_read_on_fetch", home.bytes_read_on_fetch()}};
  }
  if (provided_) {
    description["parameter_gathers"] = provided_->gathers();
    description["last_step_seconds"]["parameter_gather_wait"] = provided_->wait_seconds();
    if (parameter_offload_) description["last_step_seconds"]["parameter_fetch"] = provided_->fetch_seconds();
  }
  return description;
}

nlohmann::json DataParallelBase::memory_bound() const {
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
  const std::int64_t gather = gathers_updates ? rounded(gather_elements * static_cast<std::int64_t>(dtype_size(model_.parameter_dtype()))) : 0;
  nlohmann::json bound = {{"gradients",
                           {{"flat", runtime.flat}, {"partition", runtime.partition}, {"bucket", runtime.bucket}, {"buckets", runtime.buckets},
                            {"whole", runtime.whole}, {"model_pieces", model_pieces}, {"total", runtime.gradients() + model_pieces}}},
                          {"communication",
                           {{"received_piece", runtime.received_piece}, {"received_pieces", runtime.received_pieces},
                            {"held_by_sink", sink_held_pieces_}, {"allgather_bucket", gather},
                            {"total", std::max(runtime.communication() + sink_held_pieces_ * runtime.received_piece, gather)}}}};
  if (provided_) bound["parameters"] = parameter_bound();
  return bound;
}

// Stage 3's parameter bytes: the partition, plus the most gathered at once. A whole model (no pipeline)
// gathers in one order, so the most is exact. Resharding after forward, a layer and the one prefetched:
// the embedding and block 0, two blocks, the last block and the token table it prefetches for the head,
// the final LayerNorm and the table with the last block prefetched for backward. Keeping blocks from
// forward to backward: every block with the head's LayerNorm and table. A pipeline rank runs its layers
// in its schedule's order, so its most is bounded: the largest layer's parameters (the head's LayerNorm
// and table together) and the largest prefetch (a block or the table), and without resharding every
// block it holds beside them.
nlohmann::json DataParallelBase::parameter_bound() const {
  const std::int64_t layers = model_.config().layers;
  const GptModelPart& part = model_.part();
  const auto bytes = [&](const std::vector<std::size_t>& indices) { return provided_->gathered_bytes(indices); };
  const std::vector<std::size_t> embedding{GptParameters::kWteIndex, GptParameters::kWpeIndex}, table{GptParameters::kWteIndex};
  const std::vector<std::size_t> ln_f{GptParameters::block_index(layers), GptParameters::block_index(layers) + 1};
  std::int64_t block_bytes = 0, blocks = 0;  // every block has the same shapes
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    if (!part.has_block(layer)) continue;
    std::vector<std::size_t> block(GptBlockParameters::kCount);
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = GptParameters::block_index(layer) + i;
    block_bytes = bytes(block);
    ++blocks;
  }
  const std::int64_t embedding_bytes = part.embedding ? bytes(embedding) : 0;
  const std::int64_t table_bytes = part.has_token_table() ? bytes(table) : 0;
  const std::int64_t head = part.head ? bytes(ln_f) + table_bytes : 0;
  const GatherPolicy& policy = provided_->policy();
  const bool reshard = policy.reshard_after_forward;
  const std::int64_t prefetched_block = policy.prefetch ? block_bytes : 0;
  std::int64_t gathered = 0;
  if (part.whole() && !settings_.cuts.pipeline) {
    gathered = reshard ? std::max({embedding_bytes + prefetched_block, block_bytes + (blocks > 1 ? prefetched_block : 0), head + prefetched_block})
                       : std::max(embedding_bytes + prefetched_block, blocks * block_bytes + head);
  } else {
    const std::int64_t layer = std::max({embedding_bytes, block_bytes, head});
    const std::int64_t prefetch = policy.prefetch ? std::max(block_bytes, part.head ? table_bytes : 0) : 0;
    gathered = (reshard ? 0 : blocks * block_bytes) + layer + prefetch;
  }
  // stage3_max_live_parameters below the part's parameters may reshard blocks and skip prefetches where
  // the formula counts them: then it is a bound, not the exact most.
  std::int64_t part_elements = 0;
  for (const ParameterSpec& each : model_.parameter_specs()) part_elements += each.numel();
  const bool capped = policy.max_live_elements < part_elements;
  const std::int64_t partition = provided_->partition_bytes();  // 0 where it lives off the device
  std::int64_t largest = 0;  // DeepSpeed's estimator's "largest layer": the tied token table here
  for (const ParameterSpec& each : model_.parameter_specs()) largest = std::max(largest, each.numel());
  return {{"partition", partition}, {"block", block_bytes}, {"gathered", gathered}, {"total", partition + gathered},
          {"exact", part.whole() && !settings_.cuts.pipeline && !capped}, {"reshard_after_forward", reshard}, {"prefetch", policy.prefetch},
          {"max_live_elements", policy.max_live_elements}, {"largest_parameter_elements", largest},
          {"offloaded", parameter_offload_ ? (parameter_offload_->settings().nvme ? "nvme" : "cpu") : "none"}};
}

void DataParallelBase::begin_runtime_step() {
  gradients_.begin_step();
  if (provided_) provided_->begin_step();
}

void DataParallelBase::finish_reductions() {
  if (whole_step_) gradients_.reduce_accumulated();
  whole_step_ = false;
  gradients_.finish_step();
}

std::vector<Tensor> DataParallelBase::owned_parameter_views() const {
  if (parameter_offload_) return {};
  const std::vector<NamedTensor> whole = model_.parameters().named();
  std::vector<Tensor> views;
  for (std::size_t position = 0; position < gradients_.layout().parameter_count(); ++position) {
    const auto piece = gradients_.owned_piece(position);
    if (!piece) continue;
    views.push_back(provided_ ? provided_->partition().narrow(0, gradients_.owned().offset(piece->range.begin), piece->range.size())
                              : flat_view(*whole[position].tensor, piece->offset, piece->range.size()));
  }
  return views;
}

std::vector<std::int64_t> DataParallelBase::owned_numels() const {
  std::vector<std::int64_t> numels;
  for (std::size_t position = 0; position < gradients_.layout().parameter_count(); ++position) {
    if (const auto piece = gradients_.owned_piece(position)) numels.push_back(piece->range.size());
  }
  return numels;
}

void DataParallelBase::drop_gathered() {
  if (provided_) provided_->release_all();
}

void DataParallelBase::gather_updated_parameters() {
  if (settings_.zero_stage == 1 || settings_.zero_stage == 2) {
    gather_parameters(model_.parameters().named(), gradients_.layout(), gradients_.owned(), dp_, settings_.allgather_bucket_elements);
  }
}

void hand_owned_pieces(const DataParallelGradients& gradients, GradientSink& host) {
  std::size_t index = 0;
  for (std::size_t position = 0; position < gradients.layout().parameter_count(); ++position) {
    if (const auto piece = gradients.owned_piece(position)) host.accumulate(index++, 0, piece->gradient);
  }
}

}  // namespace ferry
