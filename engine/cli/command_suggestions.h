// "Did you mean ...?" for the command line: the nearest known subcommand or flag to a mistyped one
// (edit distance, close enough to be a typo), found by walking argv through the app's subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ferry {

// The known name nearest to `typed`, when within a typo's distance (a third of its length, at least 2).
std::optional<std::string> nearest_name(const std::string& typed, const std::vector<std::string>& known);

// A line such as "unknown flag '--step' for `ferry train`: did you mean --steps?" for the first
// unknown subcommand or flag in argv; empty when there is none or nothing is near.
std::string suggest_for_arguments(CLI::App& app, int argc, char** argv);

}  // namespace ferry
