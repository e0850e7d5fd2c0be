// Every option that takes a value refuses an empty one: CLI11 reads "" as the type's zero or as the
// default (`--save ""` saved nothing, `--resume ""` started from scratch, `--steps ""` ran no step), which
// is how an unset shell variable reaches a command line. Applied to every command of the app.
#pragma once

#include <CLI/CLI.hpp>

namespace ferry {

// Adds the check to every option of `app` and of its subcommands that takes a value (not to flags).
void refuse_empty_values(CLI::App& app);

}  // namespace ferry
