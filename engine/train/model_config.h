// The model shape a run asks for: --init-from's config.json (or its tensors), else the preset, then the
// shape flags (--layers, --hidden, --heads, --vocab, --seq).
#pragma once

#include "engine/train/train_options.h"
#include "models/gpt_config.h"

namespace ferry {

// Throws std::invalid_argument naming an unknown preset, a missing head count or a reshape of loaded weights.
GptConfig resolve_model_config(const TrainOptions& options);

// The model's shape (from the checkpoint when resuming) and the sequence length the run trains at.
struct RunShape {
  GptConfig config;
  std::int64_t sequence = 0;
};
RunShape run_shape(const TrainOptions& o);

}  // namespace ferry
