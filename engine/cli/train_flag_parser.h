// Reading `ferry train` and `ferry eval`'s flags (ARCHITECTURE.md's contract) and a JSON config with
// DeepSpeed's keys where they mean the same plus ferry's own under "ferry" into the options the loop reads
// (engine/train/train_options.h). Flags override the config; unknown keys are errors.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/train/train_options.h"

namespace ferry {

// Registers `train` on the app; the values land in options (config values first, see below).
CLI::App* add_train_command(CLI::App& app, TrainOptions& options);
CLI::App* add_eval_command(CLI::App& app, EvalOptions& options);

// The value of `flag` (--config, --plan) in argv after the `train` subcommand, if any: those files are
// read before the flags so that flags override them.
std::optional<std::string> find_train_flag(int argc, char** argv, std::string_view flag);
// Applies a JSON config file's DeepSpeed and Megatron keys to options and returns its "ferry" section as
// `ferry train` flags (--key value, underscores as dashes), to be parsed before the command line's;
// throws std::invalid_argument naming an unknown key or bad value.
std::vector<std::string> apply_config_file(const std::string& path, TrainOptions& options);
// The same for a parsed config (`path` names it in errors).
std::vector<std::string> apply_config(const nlohmann::json& config, const std::string& path, TrainOptions& options);
// `--plan FILE.json`: the config of the best plan that fits in a `ferry plan --summary` file.
std::vector<std::string> apply_plan_file(const std::string& path, TrainOptions& options);
// Checks flags from a config's "ferry" section: each names a flag of `ferry train` (else the nearest
// one is suggested) and its value parses; the error names the config key.
void check_config_flags(const std::vector<std::string>& flags, const std::string& path);

}  // namespace ferry
