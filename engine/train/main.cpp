// The ferry command line: one subcommand per job. Errors print one clear line and exit non-zero.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "engine/train/replay_command.h"
#include "engine/train/train_options.h"
#include "engine/train/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: train models larger than GPU memory, and see where every byte went"};
  app.require_subcommand(1);
  ferry::ReplayCommandOptions replay;
  ferry::add_replay_command(app, replay);
  ferry::TrainOptions train;
  ferry::add_train_command(app, train);
  ferry::EvalOptions eval;
  ferry::add_eval_command(app, eval);
  try {
    // The config is applied first, so the flags parsed next override it.
    if (const auto config = ferry::find_config_path(argc, argv)) ferry::apply_config_file(*config, train);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry: error: %s\n", error.what());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  try {
    if (app.got_subcommand("replay")) return ferry::run_replay_command(replay);
    if (app.got_subcommand("train")) return ferry::run_train_command(train);
    if (app.got_subcommand("eval")) return ferry::run_eval_command(eval);
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "ferry: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
