// The optimizer's hyperparameters as one typed value (learning-rate schedule, AdamW betas, eps and weight
// decay, gradient clipping, fp16 loss scaling), resolved once: from flags and config for a new run, from
// the checkpoint on resume, where an explicit request that contradicts the checkpoint is an error.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/core/adamw_hyperparameters.h"
#include "engine/optim/learning_rate.h"
#include "engine/optim/loss_scaler.h"

namespace ferry {

struct OptimizerSettings {
  LearningRateSchedule schedule;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global-norm clipping; 0 disables
  LossScaleSettings loss_scaling;  // fp16 only

  // Throws std::invalid_argument naming the flag and the allowed range.
  void validate() const;
  // AdamW's hyperparameters at the schedule's peak rate (each step passes its own rate).
  AdamWHyperparameters adamw() const;
  nlohmann::json to_json() const;
  // Throws nlohmann::json::exception (missing key, wrong type) or std::invalid_argument (bad value).
  static OptimizerSettings from_json(const nlohmann::json& json);
};

// What the flags and the config asked for; an unset value is the default (a new run) or the
// checkpoint's (a resume).
struct OptimizerRequest {
  std::optional<double> lr;
  std::optional<std::string> lr_schedule;
  std::optional<std::int64_t> warmup_steps;
  std::optional<std::int64_t> lr_decay_steps;  // default: --steps of the run that starts from scratch
  std::optional<double> min_lr_ratio;
  std::optional<std::string> betas;  // "B1,B2"
  std::optional<double> eps;
  std::optional<double> weight_decay;
  std::optional<double> grad_clip;
  std::optional<double> loss_scale;
  std::optional<std::int32_t> initial_scale_power;
  std::optional<std::int32_t> loss_scale_window;
  std::optional<std::int32_t> hysteresis;
  std::optional<double> min_loss_scale;
};

// A run from scratch of `steps` steps: requested values over the defaults, validated.
OptimizerSettings resolve_new_run_settings(const OptimizerRequest& request, std::int64_t steps);
// A resume: the checkpoint's settings; a requested value that differs from the saved one throws
// std::invalid_argument naming the flag and both values. With `override_schedule_steps` (a resume
// with --override-lr-schedule, Megatron's --override-opt_param-scheduler, to that many total steps)
// the learning-rate schedule is the checkpoint's with the requested schedule values taken instead of
// checked, and its horizon (--lr-decay-steps) the new total unless given; the rest must still match.
OptimizerSettings resolve_resumed_settings(const OptimizerRequest& request, const OptimizerSettings& saved, const std::string& checkpoint,
                                           std::optional<std::int64_t> override_schedule_steps = std::nullopt);

// (beta1, beta2) from "B1,B2".
std::pair<float, float> parse_betas(const std::string& text);

}  // namespace ferry
