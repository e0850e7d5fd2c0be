// The optimizer's settings as one typed value: defaults and requests for a new run, the checkpoint's
// on resume (a contradicting request names both values), the JSON a checkpoint keeps, and the fp16
// loss scaler's state between steps.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer_settings.h"

namespace ferry {
namespace {

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(OptimizerSettings, ANewRunDecaysOverItsStepsUnlessToldOtherwise) {
  OptimizerRequest request;
  EXPECT_EQ(resolve_new_run_settings(request, 600).schedule.decay_steps, 600);
  request.lr_decay_steps = 1000;
  request.lr = 6e-4;
  request.betas = "0.9,0.99";
  const OptimizerSettings settings = resolve_new_run_settings(request, 600);
  EXPECT_EQ(settings.schedule.decay_steps, 1000);
  EXPECT_EQ(settings.schedule.peak, 6e-4);
  EXPECT_EQ(settings.beta2, 0.99f);
  EXPECT_EQ(settings.adamw().learning_rate, 6e-4f);
}

TEST(OptimizerSettings, AResumeKeepsTheCheckpointsAndRefusesAContradiction) {
  OptimizerRequest original;
  original.lr = 2e-3;
  original.warmup_steps = 5;
  original.initial_scale_power = 12;
  const OptimizerSettings saved = resolve_new_run_settings(original, 100);

  const OptimizerSettings resumed = resolve_resumed_settings(OptimizerRequest{}, saved, "ckpt");
  EXPECT_EQ(resumed.to_json(), saved.to_json());
  EXPECT_EQ(resolve_resumed_settings(original, saved, "ckpt").to_json(), saved.to_json());  // the same values again

  OptimizerRequest changed;
  changed.lr = 1e-3;
  EXPECT_EQ(error_of([&] { resolve_resumed_settings(changed, saved, "ckpt"); }),
            "--lr 0.001 contradicts the checkpoint 'ckpt', which was trained with --lr 0.002: drop the flag (or its config key) to "
            "resume with the checkpoint's value, add --override-lr-schedule to take the learning-rate schedule from the flags, or start "
            "a new run from its weights with --init-from ckpt/model.safetensors");
  changed = {};
  changed.lr_decay_steps = 200;
  EXPECT_NE(error_of([&] { resolve_resumed_settings(changed, saved, "ckpt"); }).find("--lr-decay-steps 200 contradicts"), std::string::npos);
  changed = {};
  changed.lr_schedule = "constant";
  EXPECT_NE(error_of([&] { resolve_resumed_settings(changed, saved, "ckpt"); }).find("trained with --lr-schedule cosine"), std::string::npos);
  changed = {};
  changed.initial_scale_power = 16;
  EXPECT_NE(error_of([&] { resolve_resumed_settings(changed, saved, "ckpt"); }).find("trained with --initial-scale-power 12"),
            std::string::npos);
}

TEST(OptimizerSettings, AnOverriddenScheduleComesFromTheFlagsAndTheRestFromTheCheckpoint) {
  OptimizerRequest original;
  original.lr = 2e-3;
  original.warmup_steps = 5;
  const OptimizerSettings saved = resolve_new_run_settings(original, 100);
  // Stretched to 300 steps: the horizon follows --steps; every other schedule value the checkpoint's.
  const OptimizerSettings stretched = resolve_resumed_settings(OptimizerRequest{}, saved, "ckpt", 300);
  EXPECT_EQ(stretched.schedule.decay_steps, 300);
  EXPECT_EQ(stretched.schedule.peak, 2e-3);
  EXPECT_EQ(stretched.schedule.warmup_steps, 5);
  // Given values are taken, not checked; the horizon given beats --steps.
  OptimizerRequest schedule;
  schedule.lr = 5e-4;
  schedule.lr_decay_steps = 250;
  schedule.lr_schedule = "constant";
  const OptimizerSettings replaced = resolve_resumed_settings(schedule, saved, "ckpt", 300);
  EXPECT_EQ(replaced.schedule.peak, 5e-4);
  EXPECT_EQ(replaced.schedule.decay_steps, 250);
  EXPECT_EQ(replaced.schedule.kind, LearningRateKind::constant);
  // The rest must still match.
  OptimizerRequest betas;
  betas.betas = "0.8,0.95";
  EXPECT_NE(error_of([&] { resolve_resumed_settings(betas, saved, "ckpt", 300); }).find("--betas 0.8,0.95 contradicts"), std::string::npos);
}

TEST(OptimizerSettings, JsonRoundTripsExactly) {
  OptimizerRequest request;
  request.lr = 3e-4;
  request.betas = "0.85,0.975";
  request.eps = 1e-6;
  request.weight_decay = 0.05;
  request.grad_clip = 0.5;
  request.lr_schedule = "constant";
  request.min_loss_scale = 4;
  const OptimizerSettings settings = resolve_new_run_settings(request, 7);
  const OptimizerSettings again = OptimizerSettings::from_json(nlohmann::json::parse(settings.to_json().dump()));
  EXPECT_EQ(again.to_json(), settings.to_json());
  EXPECT_EQ(again.beta1, 0.85f);
  EXPECT_EQ(again.schedule.kind, LearningRateKind::constant);
}

TEST(OptimizerSettings, BadValuesNameTheFlag) {
  OptimizerRequest request;
  request.lr = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { resolve_new_run_settings(request, 1); }).find("--lr must be a positive finite number"), std::string::npos);
  request = {};
  request.lr_decay_steps = 0;
  EXPECT_NE(error_of([&] { resolve_new_run_settings(request, 1); }).find("--lr-decay-steps must be >= 1"), std::string::npos);
  request = {};
  request.grad_clip = -1;
  EXPECT_NE(error_of([&] { resolve_new_run_settings(request, 1); }).find("--grad-clip must be"), std::string::npos);
  request = {};
  request.betas = "0.9";
  EXPECT_NE(error_of([&] { resolve_new_run_settings(request, 1); }).find("--betas '0.9'"), std::string::npos);
}

TEST(LearningRateSchedule, CosineEndsAtItsDecayStepAndStaysAtTheMinimum) {
  LearningRateSchedule schedule{LearningRateKind::cosine, 1.0, 2, 6, 0.1};
  EXPECT_DOUBLE_EQ(schedule.at(0), 0.5);  // warmup
  EXPECT_DOUBLE_EQ(schedule.at(1), 1.0);
  EXPECT_DOUBLE_EQ(schedule.at(2), 1.0);  // the decay starts at the peak ...
  EXPECT_DOUBLE_EQ(schedule.at(5), 0.1);  // ... and ends at the last step of the horizon
  EXPECT_DOUBLE_EQ(schedule.at(50), 0.1);
}

TEST(LossScalerState, AScalerRestoredMidRunScalesAsTheUninterruptedOne) {
  LossScaleSettings settings;
  settings.initial_scale_power = 10;
  settings.loss_scale_window = 3;
  settings.hysteresis = 2;
  LossScaler straight(settings);
  LossScaler first(settings);
  const bool overflows[] = {false, true, false, false, true, true, false, false, false, false};
  for (int i = 0; i < 4; ++i) {
    straight.update(overflows[i]);
    first.update(overflows[i]);
  }
  LossScaler resumed(settings);
  resumed.restore(LossScalerState::from_json(nlohmann::json::parse(first.state().to_json().dump())));
  for (int i = 4; i < 10; ++i) {
    EXPECT_EQ(resumed.scale(), straight.scale()) << "step " << i;
    EXPECT_EQ(resumed.update(overflows[i]), straight.update(overflows[i])) << "step " << i;
  }
  EXPECT_EQ(resumed.describe(), straight.describe());
  nlohmann::json broken = first.state().to_json();
  broken["scale"] = -1;
  EXPECT_THROW(LossScalerState::from_json(broken), std::invalid_argument);
}

}  // namespace
}  // namespace ferry
