// `ferry train` and `ferry eval` as commands: run them (engine/train/trainer.h) and write the summary
// file --summary names (on the rank that has it).
#pragma once

#include "engine/train/train_options.h"

namespace ferry {

int run_train_command(const TrainOptions& options);
int run_eval_command(const EvalOptions& options);

}  // namespace ferry
