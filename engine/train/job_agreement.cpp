#include "engine/train/job_agreement.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/core/file_hash.h"
#include "engine/core/xxhash64.h"
#include "offload/zero_offload_optimizer.h"

namespace ferry {
namespace {

std::string text(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest text that reads back as this double
  return std::string(buffer, result.ptr);
}
std::string text(std::int64_t value) { return std::to_string(value); }
std::string text(bool value) { return value ? "true" : "false"; }
template <typename T>
std::string text(const std::optional<T>& value) {
  if (!value) return "not given";
  if constexpr (std::is_same_v<T, std::string>) return *value;
  else if constexpr (std::is_floating_point_v<T>) return text(static_cast<double>(*value));
  else return text(static_cast<std::int64_t>(*value));
}

// A file by its content, so that the same file under another path agrees and another file under the
// same path does not. A file this rank cannot read says so (the loader names the problem later).
std::string file_identity(const std::string& path, const char* when_empty) {
  if (path.empty()) return when_empty;
  try {
    return "a file of XXH64 " + xxhash64_text(xxhash64_of_file(path));
  } catch (const std::exception&) {
    return "'" + path + "', which this rank cannot read";
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string list;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!list.empty()) list += ", ";
    list += std::to_string(ranks[i]);
    if (j > i) list += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + list;
}

}  // namespace

std::vector<JobSetting> job_settings(const TrainingPlan& plan) {
  const OptimizerRequest& o = plan.optimizer;
  const offload::ZeroOffloadSettings& offload = plan.offload;
  const bool offloaded = plan.offload_optimizer.has_value();
  std::vector<JobSetting> settings = {
      {"--model", plan.model.name},
      {"--layers", text(plan.model.layers)},
      {"--hidden", text(plan.model.hidden)},
      {"--heads", text(plan.model.heads)},
      {"--vocab", text(plan.model.vocab)},
      {"the model's positions (n_positions)", text(plan.model.max_sequence)},
      {"--seq", text(plan.sequence)},
      {"--tp", text(std::int64_t{plan.grid.tp})},
      {"--dp", text(std::int64_t{plan.grid.dp})},
      {"--pp", text(std::int64_t{plan.grid.pp})},
      {"--batch", text(plan.micro_batch)},
      {"--micro-batches (--grad-accum)", text(plan.micro_batches)},
      {"--schedule", plan.grid.pp > 1 ? plan.pipeline_schedule : "none (no pipeline)"},
      {"--precision", std::string(dtype_name(plan.precision))},
      {"--device", std::string(device_kind_name(plan.device))},
      {"--dry-run-of", std::string(device_kind_name(plan.kernels))},
      {"--device-memory", plan.device_memory_limit == 0 ? "the device's default" : text(static_cast<std::int64_t>(plan.device_memory_limit)) + " bytes"},
      {"FERRY_ALLOC_CONF", plan.allocator.to_string()},
      {"--checkpointing", plan.recompute.name()},
      {"--loss-chunk", text(plan.loss_chunk)},
      {"--weight-copy-elements", text(plan.weight_copy_elements)},
      {"--zero-stage", text(std::int64_t{plan.zero_stage})},
      {"--reduce-bucket-size", text(plan.reduce_bucket_elements)},
      {"--allgather-bucket-size", text(plan.allgather_bucket_elements)},
      {"--overlap-comm", text(plan.overlap_comm)},
      {"--reshard-after-forward", text(plan.gather.reshard_after_forward)},
      {"--stage3-prefetch-bucket-size", plan.gather.prefetch ? "above 0 (the next layer prefetched)" : "0 (no prefetch)"},
      {"--stage3-max-live-parameters", text(plan.gather.max_live_elements)},
      {"--offload-optimizer", offloaded ? offload::offload_device_name(*plan.offload_optimizer) : "none"},
      {"--offload-param", plan.offload_param ? (plan.offload_param->nvme ? "nvme" : "cpu") : "none"},
      {"--offload-param-buffer-count", plan.offload_param ? text(std::int64_t{plan.offload_param->buffer_count}) : "none"},
      {"--offload-param-buffer-size", plan.offload_param ? text(static_cast<std::int64_t>(plan.offload_param->buffer_bytes)) + " bytes" : "none"},
  };
  if (offloaded) {
    settings.insert(settings.end(), {
        {"--offload-pin-memory", text(offload.pin_memory)},
        {"--offload-buffer-count", text(std::int64_t{offload.buffer_count})},
        {"--offload-buffer-size", text(static_cast<std::int64_t>(offload.buffer_pool_bytes)) + " bytes"},
        {"--offload-sub-group", text(offload.sub_group_elements)},
        {"--offload-queue-depth", text(static_cast<std::int64_t>(offload.queue_depth))},
        {"offload chunk bytes", text(static_cast<std::int64_t>(offload.chunk_bytes))},
    });
  }
  settings.insert(settings.end(), {
      {"--steps", text(plan.steps)},
      {"--exit-interval", text(plan.exit_interval)},
      {"--seed", std::to_string(plan.seed)},
      {"--dropout", text(double{plan.dropout.embedding}) + " (embeddings), " + text(double{plan.dropout.attention}) + " (attention), " +
                        text(double{plan.dropout.residual}) + " (residuals)"},
      {"--lr", text(o.lr)},
      {"--lr-schedule", text(o.lr_schedule)},
      {"--warmup-steps", text(o.warmup_steps)},
      {"--lr-decay-steps", text(o.lr_decay_steps)},
      {"--min-lr-ratio", text(o.min_lr_ratio)},
      {"--betas", text(o.betas)},
      {"--eps", text(o.eps)},
      {"--weight-decay", text(o.weight_decay)},
      {"--grad-clip", text(o.grad_clip)},
      {"--loss-scale", text(o.loss_scale)},
      {"--initial-scale-power", text(o.initial_scale_power)},
      {"--loss-scale-window", text(o.loss_scale_window)},
      {"--hysteresis", text(o.hysteresis)},
      {"--min-loss-scale", text(o.min_loss_scale)},
      {"--data", file_identity(plan.io.data, "the built-in corpus")},
      {"--shuffle", text(plan.io.shuffle)},
      {"--eval-data", file_identity(plan.io.eval_data, "none")},
      {"--eval-every", text(plan.io.eval_every)},
      {"--eval-batches", text(plan.io.eval_batches)},
      {"--init-from", file_identity(plan.io.init_from, "none")},
      {"--resume", plan.io.resume.empty() ? "none" : plan.io.resume},
      {"--override-lr-schedule", text(plan.io.override_lr_schedule)},
      {"--save", plan.io.save.empty() ? "none" : plan.io.save},
      {"--save-every", text(plan.io.save_every)},
      {"--keep-checkpoints", text(plan.io.keep_checkpoints)},
      {"--overwrite-checkpoints", text(plan.io.overwrite_checkpoints)},
      {"--profile-steps", text(plan.io.profile_steps.first) + "-" + text(plan.io.profile_steps.last) +
                              (plan.io.profile_steps.from_run_start ? " of the run" : "")},
  });
  return settings;
}

std::string encode_job_settings(const std::vector<JobSetting>& settings) {
  nlohmann::json pairs = nlohmann::json::array();
  for (const JobSetting& setting : settings) pairs.push_back({setting.name, setting.value});
  return pairs.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<JobSetting> decode_job_settings(const std::string& text) {
  const nlohmann::json pairs = nlohmann::json::parse(text, nullptr, false);
  std::vector<JobSetting> settings;
  if (!pairs.is_array()) throw JobMismatchError("a rank sent its settings garbled; every rank must run the same ferry build");
  for (const nlohmann::json& pair : pairs) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      throw JobMismatchError("a rank sent its settings garbled; every rank must run the same ferry build");
    }
    settings.push_back({pair[0].get<std::string>(), pair[1].get<std::string>()});
  }
  return settings;
}

std::string describe_job_mismatch(const std::vector<std::vector<JobSetting>>& ranks) {
  if (ranks.size() < 2) return {};
  const std::vector<JobSetting>& first = ranks[0];
  const std::string advice = "; launch every rank with the same flags, config and files (settings that may differ by rank: " +
                             std::string(kRankLocalSettings) + ")";
  for (std::size_t r = 1; r < ranks.size(); ++r) {
    if (ranks[r].size() != first.size()) {
      return "the ranks run different ferry builds (rank 0 lists " + std::to_string(first.size()) + " settings, rank " + std::to_string(r) +
             " " + std::to_string(ranks[r].size()) + ")" + advice;
    }
  }
  for (std::size_t s = 0; s < first.size(); ++s) {
    std::vector<std::pair<std::string, std::vector<int>>> values;  // in the order of the first rank that holds each
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (ranks[r][s].name != first[s].name) {
        return "the ranks run different ferry builds (setting " + std::to_string(s) + " is " + first[s].name + " on rank 0, " +
               ranks[r][s].name + " on rank " + std::to_string(r) + ")" + advice;
      }
      auto held = std::find_if(values.begin(), values.end(), [&](const auto& entry) { return entry.first == ranks[r][s].value; });
      if (held == values.end()) values.push_back({ranks[r][s].value, {static_cast<int>(r)}});
      else held->second.push_back(static_cast<int>(r));
    }
    if (values.size() == 1) continue;
    std::string message = "the ranks were launched with different settings: " + first[s].name + " is ";
    for (std::size_t v = 0; v < values.size(); ++v) {
      if (v > 0) message += v + 1 == values.size() ? " and " : ", ";
      message += values[v].first + " on " + rank_list(values[v].second);
    }
    return message + advice;
  }
  return {};
}

void require_same_job(Communicator& world, const TrainingPlan& plan) {
  const std::vector<std::string> gathered = world.gather_strings(encode_job_settings(job_settings(plan)), 0);
  std::string mismatch;
  if (world.rank() == 0) {
    std::vector<std::vector<JobSetting>> ranks;
    try {
      for (const std::string& entry : gathered) ranks.push_back(decode_job_settings(entry));
      mismatch = describe_job_mismatch(ranks);
    } catch (const JobMismatchError& error) {
      mismatch = error.what();
    }
  }
  std::uint64_t length = mismatch.size();
  world.broadcast(&length, sizeof length, 0);
  mismatch.resize(length);
  if (length > 0) world.broadcast(mismatch.data(), length, 0);
  if (!mismatch.empty()) throw JobMismatchError(mismatch);
}

}  // namespace ferry
