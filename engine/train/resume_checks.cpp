#include "engine/train/resume_checks.h"
#include "engine/core/bounded_json.h"
#include "engine/core/xxhash64.h"
#include "engine/train/training_setup.h"

#include <algorithm>
#include <map>
#include <cstdio>
#include <optional>
#include <stdexcept>

namespace ferry {

// Settings a resumed run must share with the run that saved, for the resume to be exact. The data is
// known by its content, not its path.
// A resume may change the grid: what must match is the global batch in micro-batches, not grad-accum.
nlohmann::json resume_contract(const TrainingPlan& plan, const TokenDataset& data) {
  const TokenDataset::Identity identity = data.identity();
  return {{"batch", plan.micro_batch}, {"seq", plan.sequence}, {"micro_batches_per_step", plan.micro_batches * plan.grid.dp},
          {"precision", precision_name(plan.precision)},
          {"data", {{"tokens", identity.tokens}, {"xxh64", xxhash64_text(identity.xxh64)}}}, {"shuffle", plan.io.shuffle}, {"seed", plan.seed}};
}

// A resume takes the model's shape from the checkpoint; shape flags may repeat it, not change it.
void check_shape_flags_against_checkpoint(const TrainOptions& o, const GptConfig& config) {
  const std::pair<const char*, std::optional<std::int64_t>> requested[] = {
      {"--layers", o.layers}, {"--hidden", o.hidden}, {"--heads", o.heads}, {"--vocab", o.vocab}};
  const std::int64_t saved[] = {config.layers, config.hidden, config.heads, config.vocab};
  for (std::size_t i = 0; i < std::size(saved); ++i) {
    const auto& [flag, value] = requested[i];
    if (value && *value != saved[i]) {
      throw std::invalid_argument(std::string(flag) + " " + std::to_string(*value) + " contradicts the checkpoint '" + o.resume +
                                  "', whose model has " + flag + " " + std::to_string(saved[i]) + ": drop the flag to resume it");
    }
  }
  if (o.model_given) {
    const std::optional<GptConfig> preset = gpt_preset(o.model);
    if (!preset) {
      throw std::invalid_argument("unknown --model '" + o.model + "' beside --resume (the model is the checkpoint's: drop --model to resume it)");
    }
    // The preset's shape with the flags that override it (each checked above).
    if (o.layers.value_or(preset->layers) != config.layers || o.hidden.value_or(preset->hidden) != config.hidden ||
        o.heads.value_or(preset->heads) != config.heads || o.vocab.value_or(preset->vocab) != config.vocab) {
      throw std::invalid_argument("--model " + o.model + " contradicts the checkpoint '" + o.resume + "', whose model has " +
                                  std::to_string(config.layers) + " layers of width " + std::to_string(config.hidden) + ", " +
                                  std::to_string(config.heads) + " heads and a vocabulary of " + std::to_string(config.vocab) +
                                  ": drop --model to resume it");
    }
  }
  if (!o.init_from.empty()) {
    std::printf("  note: --init-from %s is not read: --resume continues from the checkpoint's weights\n", o.init_from.c_str());
  }
}

// The last step this run takes: --steps, or earlier at the first multiple of --exit-interval after
// the step it starts from.
std::int64_t stopping_step(const TrainingPlan& plan, std::int64_t first_step) {
  if (!plan.exit_interval) return plan.steps;
  const std::int64_t interval = *plan.exit_interval;
  return std::min(plan.steps, (first_step / interval + 1) * interval);
}

void check_resume_contract(nlohmann::json saved, const nlohmann::json& current, const std::string& directory, int dp) {
  // Checkpoints from one-rank runs before grids recorded grad_accum: the same micro-batches per step.
  if (!saved.contains("micro_batches_per_step") && saved.contains("grad_accum")) saved["micro_batches_per_step"] = saved["grad_accum"];
  const std::string prefix = "--resume '" + directory + "': ";
  for (const auto& [key, value] : current.items()) {
    if (saved.contains(key) && saved[key] == value) continue;
    const std::string was = saved.contains(key) ? json_text(saved[key]) : "unknown";
    if (key == "micro_batches_per_step" && saved.contains(key) && saved[key].is_number_integer() && value.is_number_integer()) {
      // The global batch in micro-batches is --grad-accum (--micro-batches) x the data-parallel ranks.
      const std::int64_t total = saved[key].get<std::int64_t>(), asked = value.get<std::int64_t>();
      const std::int64_t accumulation = asked / std::max(dp, 1);
      std::string fix = total % std::max(dp, 1) == 0 ? "--grad-accum " + std::to_string(total / std::max(dp, 1)) + " at these " +
                                                           std::to_string(dp) + " data-parallel ranks"
                                                     : "a data-parallel size that divides " + std::to_string(total);
      if (accumulation > 0 && total % accumulation == 0 && total / accumulation != dp) {
        fix += ", or " + std::to_string(total / accumulation) + " data-parallel ranks with --grad-accum " + std::to_string(accumulation);
      }
      throw std::invalid_argument(prefix + "the checkpoint's steps are " + std::to_string(total) + " micro-batches each (--grad-accum x " +
                                  "data-parallel ranks), this run's --grad-accum " + std::to_string(accumulation) + " x " + std::to_string(dp) +
                                  " ranks = " + std::to_string(asked) + "; resume with " + fix + " (the data order and the optimizer's steps "
                                  "follow the global batch)");
    }
    static const std::map<std::string, std::string> kFlags = {{"batch", "--batch"}, {"seq", "--seq"}, {"precision", "--precision"},
                                                               {"data", "--data"},   {"shuffle", "--shuffle"}, {"seed", "--seed"}};
    const auto flag = kFlags.find(key);
    const std::string name = flag != kFlags.end() ? flag->second : key;
    if (key == "data") {
      throw std::invalid_argument(prefix + "the checkpoint was trained on other data (" + was + "), this run's --data is " + json_text(value) +
                                  "; resume with the checkpoint's data file");
    }
    throw std::invalid_argument(prefix + "the checkpoint was trained with " + name + " " + was + ", this run asks for " + json_text(value) +
                                "; resume with " + name + " " + was);
  }
}

}  // namespace ferry
