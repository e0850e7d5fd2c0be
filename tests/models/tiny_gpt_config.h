// The smallest GPT the model tests train (2 blocks of width 16, 2 heads, 11 tokens, sequences of 8):
// one definition for the tests that need a model and nothing particular about its shape.
#pragma once

#include "models/gpt_model.h"

namespace ferry::testing {

inline GptConfig tiny_gpt_config() {
  GptConfig config;
  config.name = "tiny-test";
  config.layers = 2;
  config.hidden = 16;
  config.heads = 2;
  config.vocab = 11;
  config.max_sequence = 8;
  return config;
}

}  // namespace ferry::testing
