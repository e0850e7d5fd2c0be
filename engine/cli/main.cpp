// The ferry command line: one subcommand per job. Errors print one clear line and exit non-zero.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cli/bench_memory.h"
#include "engine/cli/build_info.h"
#include "engine/cli/command_suggestions.h"
#include "engine/cli/empty_values.h"
#include "engine/cli/replay_command.h"
#include "engine/cli/report_command.h"
#include "engine/cli/plan_command.h"
#include "engine/cli/schedule_command.h"
#include "engine/cli/train_command.h"
#include "engine/cli/train_flag_parser.h"
#include "models/kernels/cpu/compute_threads.h"

namespace {

// OpenBLAS picks its GEMM kernels when it loads, before main. When it fell back to pre-AVX2 kernels on
// a CPU with AVX2 and FMA (CPUs it does not know, as in some VMs: 2-3x slower), run ferry again with
// OPENBLAS_CORETYPE set. A user's own OPENBLAS_CORETYPE is always respected.
void prefer_fast_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string core = ferry::cpu::better_blas_core();
  if (core.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then go on with the slow kernels
}

}  // namespace

int main(int argc, char** argv) {
  prefer_fast_blas_kernels(argv);
  CLI::App app{"ferry: train models larger than GPU memory, and see where every byte went"};
  app.require_subcommand(1);
  // A flag given twice takes its last value (as a later flag overrides the config file's).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();  // --help shows defaults
  app.set_version_flag("--version", [] { return ferry::version_text(); });
  ferry::ReplayCommandOptions replay;
  ferry::add_replay_command(app, replay);
  ferry::ScheduleCommandOptions schedule;
  ferry::add_schedule_command(app, schedule);
  ferry::TrainOptions train;
  ferry::add_train_command(app, train);
  ferry::EvalOptions eval;
  ferry::add_eval_command(app, eval);
  ferry::ReportOptions report;
  ferry::add_report_command(app, report);
  ferry::BenchMemoryOptions bench_memory;
  ferry::add_bench_command(app, bench_memory);
  ferry::PlanCommandOptions plan;
  ferry::add_plan_command(app, plan);
  ferry::refuse_empty_values(app);
  // The config is applied first, then a saved plan's (`--plan FILE.json`, `ferry plan --summary`): their
  // DeepSpeed keys into the options, their "ferry" sections as flags that go before the command line's,
  // so that the plan overrides the config and the command line both.
  std::vector<std::string> arguments(argv + 1, argv + argc);
  try {
    std::vector<std::string> flags;
    if (const auto config = ferry::find_train_flag(argc, argv, "--config")) {
      flags = ferry::apply_config_file(*config, train);
      ferry::check_config_flags(flags, *config);
    }
    if (const auto plan_file = ferry::find_train_flag(argc, argv, "--plan"); plan_file && *plan_file != "auto") {
      const std::vector<std::string> planned = ferry::apply_plan_file(*plan_file, train);
      ferry::check_config_flags(planned, *plan_file);
      flags.insert(flags.end(), planned.begin(), planned.end());
    }
    const auto command = std::find(arguments.begin(), arguments.end(), "train");
    if (command != arguments.end()) arguments.insert(command + 1, flags.begin(), flags.end());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry: error: %s\n", error.what());
    return 1;
  }
  std::reverse(arguments.begin(), arguments.end());  // CLI11 reads a vector from its end
  try {
    app.parse(arguments);
  } catch (const CLI::ParseError& error) {
    const std::string hint = error.get_exit_code() != 0 ? ferry::suggest_for_arguments(app, argc, argv) : "";
    const int code = app.exit(error);
    if (!hint.empty()) std::fprintf(stderr, "%s\n", hint.c_str());
    return code;
  }
  try {
    if (app.got_subcommand("replay")) return ferry::run_replay_command(replay);
    if (app.got_subcommand("schedule")) return ferry::run_schedule_command(schedule);
    if (app.got_subcommand("train")) return ferry::run_train_command(train);
    if (app.got_subcommand("eval")) return ferry::run_eval_command(eval);
    if (app.got_subcommand("report")) return ferry::run_report_command(report);
    if (app.got_subcommand("plan")) return ferry::run_plan_command(plan);
    if (ferry::bench_memory_requested(app)) return ferry::run_bench_memory_command(bench_memory);
  } catch (const std::bad_alloc&) {  // host memory (device memory has its own error and advice)
    std::fflush(stdout);
    std::fprintf(stderr, "ferry: error: this machine ran out of host memory (RAM) for what the command asked; use smaller sizes "
                         "(--batch, --seq, the model) or a machine with more memory\n");
    return 1;
  } catch (const std::length_error& error) {  // a container asked for more than it can hold: a size past any machine
    std::fflush(stdout);
    std::fprintf(stderr, "ferry: error: a size is past what any machine holds (%s); use smaller sizes\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "ferry: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
