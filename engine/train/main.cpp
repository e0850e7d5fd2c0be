// The ferry command line: one subcommand per job. Errors print one clear line and exit non-zero.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "engine/train/replay_command.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: train models larger than GPU memory, and see where every byte went"};
  app.require_subcommand(1);
  ferry::ReplayCommandOptions replay;
  ferry::add_replay_command(app, replay);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  try {
    if (app.got_subcommand("replay")) return ferry::run_replay_command(replay);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
