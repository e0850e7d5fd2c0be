#include "engine/cli/empty_values.h"

#include <string>

namespace ferry {

void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](const std::string& text) -> std::string {
        if (!text.empty()) return {};
        return "an empty value (an unset shell variable?): give the flag a value, or leave it out for its default";
      },
      "");  // no description: --help shows the option as before
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size_min() > 0) option->check(non_empty);
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*command);
}

}  // namespace ferry
