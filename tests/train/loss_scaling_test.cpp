// fp16 training and its loss scaling: the scaler follows DeepSpeed's rules step by step (window,
// hysteresis, minimum, static scales); a power-of-two scale gives bitwise the losses of no scaling
// (unscaling is exact); fp16 tracks fp32; overflowing steps are skipped without touching the parameters
// and the scale halves until training proceeds; DeepSpeed's fp16 config section maps onto the flags.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/cli/train_flag_parser.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/training_optimizer.h"
#include "engine/train/trainer.h"
#include "engine/train/training_step.h"
#include "tests/train/tiny_training.h"

namespace ferry {
namespace {

LossScaleSettings dynamic_settings(std::int32_t power, std::int32_t window, std::int32_t hysteresis, double minimum = 1) {
  LossScaleSettings settings;
  settings.initial_scale_power = power;
  settings.loss_scale_window = window;
  settings.hysteresis = hysteresis;
  settings.min_loss_scale = minimum;
  return settings;
}

TEST(LossScaler, DoublesAfterEachWindowWithoutOverflow) {
  LossScaler scaler(dynamic_settings(4, 3, 2));
  EXPECT_EQ(scaler.scale(), 16.0);
  const std::vector<double> expected{16, 16, 32, 32, 32, 64};  // the scale after each clean step
  for (double scale : expected) {
    EXPECT_TRUE(scaler.update(false));
    EXPECT_EQ(scaler.scale(), scale);
  }
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(LossScaler, HysteresisToleratesOverflowsBeforeHalving) {
  LossScaler scaler(dynamic_settings(10, 100, 3));
  EXPECT_FALSE(scaler.update(true));  // hysteresis 3 -> 2, skipped, scale kept
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_FALSE(scaler.update(true));  // 2 -> 1
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_FALSE(scaler.update(true));  // no hysteresis left: halves, and keeps halving on each overflow
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.skipped_steps(), 4);
  EXPECT_EQ(scaler.describe()["scale_decreases"], 2);
}

TEST(LossScaler, TheWindowCountsFromTheLastOverflowAndRestoresHysteresis) {
  LossScaler scaler(dynamic_settings(3, 2, 2));
  EXPECT_FALSE(scaler.update(true));  // tolerated
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));  // two clean steps since the overflow: doubles, hysteresis back to 2
  EXPECT_EQ(scaler.scale(), 16.0);
  EXPECT_FALSE(scaler.update(true));  // tolerated again
  EXPECT_EQ(scaler.scale(), 16.0);
}

TEST(LossScaler, NeverGoesBelowTheMinimumAndSaysWhenItIsThere) {
  LossScaler scaler(dynamic_settings(2, 100, 1, 2.0));
  EXPECT_FALSE(scaler.at_minimum());
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 2.0);
  EXPECT_TRUE(scaler.at_minimum());
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 2.0);
}

TEST(LossScaler, AStaticScaleSkipsOverflowsAndNeverMoves) {
  LossScaleSettings settings;
  settings.loss_scale = 128;
  LossScaler scaler(settings);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_FALSE(scaler.update(true));
  for (int i = 0; i < 2000; ++i) EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 128.0);
  EXPECT_FALSE(scaler.at_minimum());
}

TEST(LossScaler, BadSettingsNameTheKey) {
  auto message = [](LossScaleSettings settings) {
    try {
      LossScaler scaler(settings);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  LossScaleSettings settings;
  settings.loss_scale = -1;
  EXPECT_NE(message(settings).find("fp16.loss_scale"), std::string::npos);
  settings = {};
  settings.loss_scale_window = 0;
  EXPECT_NE(message(settings).find("fp16.loss_scale_window"), std::string::npos);
  settings = {};
  settings.hysteresis = 0;
  EXPECT_NE(message(settings).find("fp16.hysteresis"), std::string::npos);
  settings = {};
  settings.initial_scale_power = 200;
  EXPECT_NE(message(settings).find("fp16.initial_scale_power"), std::string::npos);
  settings = {};
  settings.min_loss_scale = 0;
  EXPECT_NE(message(settings).find("fp16.min_loss_scale"), std::string::npos);
}

TrainOptions tiny_run(const std::string& precision) {
  TrainOptions o = testing::tiny_training(2);
  o.steps = 4;
  o.dropout = 0.1f;
  o.precision = precision;
  return o;
}

std::vector<double> losses(const nlohmann::json& summary) { return testing::step_losses(summary); }

// Activation gradients are f16, so the scale decides what underflows and rounds: a scaled run agrees
// with an unscaled one to f16's rounding, not bitwise; the default dynamic scale (2^16) does not
// overflow here.
TEST(Fp16Training, ScalesRoundDifferentlyButAgree) {
  TrainOptions unscaled = tiny_run("fp16");
  unscaled.optimizer.loss_scale = 1;
  const std::vector<double> expected = losses(run_training(unscaled));
  TrainOptions scaled = tiny_run("fp16");
  scaled.optimizer.loss_scale = 1024;
  const std::vector<double> scaled_losses = losses(run_training(scaled));
  const nlohmann::json dynamic = run_training(tiny_run("fp16"));
  ASSERT_EQ(scaled_losses.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(scaled_losses[i], expected[i], 1e-3 * expected[i]) << "step " << i + 1;
    EXPECT_NEAR(losses(dynamic)[i], expected[i], 1e-3 * expected[i]) << "step " << i + 1;
  }
  EXPECT_EQ(dynamic["loss_scaling"]["scale"], 65536.0);
  EXPECT_EQ(dynamic["loss_scaling"]["skipped_steps"], 0);
  EXPECT_EQ(dynamic["steps"][0]["loss_scale"], 65536.0);
  EXPECT_EQ(dynamic["steps"][0]["skipped"], false);
}

TEST(Fp16Training, TracksFp32) {
  const std::vector<double> fp32 = losses(run_training(tiny_run("fp32")));
  const std::vector<double> fp16 = losses(run_training(tiny_run("fp16")));
  ASSERT_EQ(fp16.size(), fp32.size());
  for (std::size_t i = 0; i < fp32.size(); ++i) EXPECT_NEAR(fp16[i], fp32[i], 5e-3 * fp32[i]) << "step " << i + 1;
  EXPECT_NE(fp16, fp32);  // the parameters really are rounded to fp16
}

// Activation gradients are f16 (max 65504), so a scale of 2^40 overflows them: the steps are skipped
// without touching the parameters or the optimizer, the scale halves (after the hysteresis) until the
// scaled gradients fit, and then training proceeds.
TEST(Fp16Training, OverflowingStepsAreSkippedUntouchedAndTheScaleHalvesUntilTrainingProceeds) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config{"fp16-overflow", 2, 32, 2, 256, 16};
  GptModel model(*device, config, DType::f16);
  initialize_gpt_parameters(model.parameters(), config, 1);
  cpu::AdamWHyperparameters hyperparameters;
  const std::unique_ptr<TrainingOptimizer> optimizer = make_device_optimizer(model, hyperparameters);
  const TokenDataset data = TokenDataset::embedded_corpus();
  DataLoader loader(data, 2, 16, false, 0);
  const StepSettings settings{2, 16, 1, 7, 1.0};
  LossScaleSettings scaling;
  scaling.initial_scale_power = 40;
  scaling.hysteresis = 2;
  LossScaler scaler(scaling);
  auto parameters = [&] {
    std::vector<float> values;
    for (const NamedTensor& each : model.parameters().named()) {
      const std::vector<float> part = copy_to_host_f32(*each.tensor);
      values.insert(values.end(), part.begin(), part.end());
    }
    return values;
  };
  std::int64_t step = 0;
  for (; step < 40; ++step) {
    const std::vector<float> before = parameters();
    const double scale = scaler.scale();
    const StepResult result = run_training_step(*device, model, *optimizer, loader, settings, step, 1e-3, {}, &scaler);
    EXPECT_EQ(result.loss_scale, scale);
    EXPECT_TRUE(std::isfinite(result.loss));
    if (!result.skipped) {
      EXPECT_NE(parameters(), before) << "step " << step + 1;
      break;
    }
    EXPECT_EQ(parameters(), before) << "a skipped step " << step + 1 << " changed the parameters";
    EXPECT_EQ(optimizer->steps_taken(), 0);
  }
  const std::int64_t skipped = scaler.skipped_steps();
  RecordProperty("skipped_steps", static_cast<int>(skipped));
  EXPECT_EQ(step, skipped);  // every step before the first applied one was skipped
  EXPECT_GE(skipped, 3);
  EXPECT_LT(skipped, 40);
  EXPECT_EQ(scaler.describe()["scale_decreases"].get<std::int64_t>(), skipped - 1);  // the first overflow is tolerated
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 40 - static_cast<int>(skipped) + 1));
  EXPECT_EQ(optimizer->steps_taken(), 1);
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / ("ferry_fp16_" + name + ".json")).string();
  std::ofstream(path) << text;
  return path;
}

TEST(Fp16Config, DeepSpeedsSectionSetsPrecisionAndScaling) {
  TrainOptions o;
  apply_config_file(write_config("ok", R"({"fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
                                  "loss_scale_window": 500, "hysteresis": 4, "min_loss_scale": 2}})"),
                    o);
  EXPECT_EQ(o.precision, "fp16");
  EXPECT_EQ(o.optimizer.loss_scale, 0.0);
  EXPECT_EQ(o.optimizer.initial_scale_power, 12);
  EXPECT_EQ(o.optimizer.loss_scale_window, 500);
  EXPECT_EQ(o.optimizer.hysteresis, 4);
  EXPECT_EQ(o.optimizer.min_loss_scale, 2.0);
  TrainOptions disabled;
  apply_config_file(write_config("off", R"({"fp16": {"enabled": false, "initial_scale_power": 3}})"), disabled);
  EXPECT_EQ(disabled.precision, "fp32");
}

TEST(Fp16Config, AmbiguousOrUnknownSettingsAreRefused) {
  TrainOptions o;
  EXPECT_THROW(apply_config_file(write_config("both", R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})"), o),
               std::invalid_argument);
  EXPECT_THROW(apply_config_file(write_config("unknown", R"({"fp16": {"enabled": true, "auto_cast": true}})"), o), std::invalid_argument);
}

}  // namespace
}  // namespace ferry
