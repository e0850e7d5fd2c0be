// Test helper: the options of a tiny `ferry train` run (gpt2-tiny's vocabulary, 16 tokens, batch 2,
// 3 steps, one thread, quiet) that tests then adjust, and the per-step losses of a run's summary.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/train/train_options.h"

namespace ferry::testing {

inline TrainOptions tiny_training(std::int64_t layers, std::int64_t hidden = 32, std::int64_t heads = 2) {
  TrainOptions o;
  o.model = "gpt2-tiny";
  o.layers = layers;
  o.hidden = hidden;
  o.heads = heads;
  o.vocab = 256;
  o.seq = 16;
  o.batch = 2;
  o.steps = 3;
  o.optimizer.lr = 3e-3;
  o.threads = 1;
  o.log_every = 1000;
  return o;
}

inline std::vector<double> step_losses(const nlohmann::json& summary) {
  std::vector<double> result;
  for (const nlohmann::json& step : summary["steps"]) result.push_back(step["loss"].get<double>());
  return result;
}

}  // namespace ferry::testing
