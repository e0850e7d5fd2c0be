// Reading `ferry train` and `ferry eval`'s flags (ARCHITECTURE.md's contract) and a JSON config with
// DeepSpeed's keys where they mean the same plus ferry's own under "ferry" into the options the loop reads
// (engine/train/train_options.h). Flags override the config; unknown keys are errors.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/train/train_options.h"

namespace ferry {

// Registers `train` on the app; the values land in options (config values first, see below).
CLI::App* add_train_command(CLI::App& app, TrainOptions& options);
CLI::App* add_eval_command(CLI::App& app, EvalOptions& options);

// The value of --config in argv after the `train` subcommand, if any: it is read before the flags so
// that flags override it.
std::optional<std::string> find_config_path(int argc, char** argv);
// Applies a JSON config file's DeepSpeed and Megatron keys to options and returns its "ferry" section as
// `ferry train` flags (--key value, underscores as dashes), to be parsed before the command line's;
// throws std::invalid_argument naming an unknown key or bad value.
std::vector<std::string> apply_config_file(const std::string& path, TrainOptions& options);
// Checks flags from a config's "ferry" section: each names a flag of `ferry train` (else the nearest
// one is suggested) and its value parses; the error names the config key.
void check_config_flags(const std::vector<std::string>& flags, const std::string& path);

}  // namespace ferry
