#include "engine/cli/command_suggestions.h"

#include <algorithm>
#include <string_view>

namespace ferry {
namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> subcommand_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* each : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(each->get_name());
  return names;
}

CLI::App* find_subcommand(CLI::App& app, const std::string& name) {
  for (CLI::App* each : app.get_subcommands([](CLI::App*) { return true; })) {
    if (each->get_name() == name) return each;
  }
  return nullptr;
}

std::string command_path(const std::vector<std::string>& words) {
  std::string path = "ferry";
  for (const std::string& word : words) path += " " + word;
  return path;
}

}  // namespace

std::optional<std::string> nearest_name(const std::string& typed, const std::vector<std::string>& known) {
  const std::size_t allowed = std::max<std::size_t>(2, typed.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const std::string& name : known) {
    const std::size_t distance = edit_distance(typed, name);
    const bool prefix = name.size() > typed.size() && name.starts_with(typed) && typed.size() >= 3;
    const std::size_t score = prefix ? 1 : distance;
    if (score < best_distance) {
      best_distance = score;
      best = name;
    }
  }
  return best;
}

std::string suggest_for_arguments(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::vector<std::string> path;
  bool options_seen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--") break;
    if (argument.starts_with("--")) {
      options_seen = true;
      const std::string flag = argument.substr(0, argument.find('='));
      if (current->get_option_no_throw(flag) != nullptr) continue;
      std::vector<std::string> known;
      for (const CLI::Option* option : current->get_options()) {
        for (const std::string& name : option->get_lnames()) known.push_back("--" + name);
      }
      const std::optional<std::string> near = nearest_name(flag, known);
      return "unknown flag '" + flag + "' for `" + command_path(path) + "`" +
             (near ? ": did you mean " + *near + "?" : "; `" + command_path(path) + " --help` lists the flags");
    }
    if (argument.starts_with("-") || options_seen) continue;  // a short flag or a flag's value
    if (CLI::App* sub = find_subcommand(*current, argument)) {
      current = sub;
      path.push_back(argument);
      continue;
    }
    const std::vector<std::string> known = subcommand_names(*current);
    if (known.empty()) continue;  // a positional argument (a file)
    const std::optional<std::string> near = nearest_name(argument, known);
    std::string list;
    for (const std::string& name : known) list += (list.empty() ? "" : ", ") + name;
    return "unknown command '" + argument + "' for `" + command_path(path) + "`" + (near ? ": did you mean '" + *near + "'?" : "") +
           " (commands: " + list + ")";
  }
  return "";
}

}  // namespace ferry
