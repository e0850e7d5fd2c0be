// A checkpoint's trainer_state.json (--resume): the format version, step counts and their ranges, the
// run's settings, the optimizer's schedule and hyperparameters and the fp16 loss scaler's state.
#include <stdexcept>

#include "engine/checkpoint/trainer_state.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_trainer_state(const std::uint8_t* data, std::size_t size) {
  try {
    const TrainerState state = parse_trainer_state(text_of(data, size), "fuzz-checkpoint");
    (void)trainer_state_text(state, state.optimizer_steps);  // what is accepted is written again
  } catch (const CheckpointError& error) {
    require_own_words(error, text_of(data, size));
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_trainer_state)
