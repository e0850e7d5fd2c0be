#include "engine/cli/schedule_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "engine/core/atomic_file.h"
#include "schedule/pipeline_lowering.h"
#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_simulator.h"
#include "schedule/pipeline_theory.h"

namespace ferry {
namespace {

// At most this many validation problems are printed; the rest are counted.
constexpr std::size_t kProblemsShown = 20;

PipelineSchedule read_schedule(const ScheduleCommandOptions& options) {
  if (!options.schedule_name.empty()) {
    throw std::invalid_argument("--schedule and --from " + options.from_path + " exclude each other: drop one");
  }
  PipelineSchedule schedule;
  try {
    schedule = parse_pipeline_schedule(read_text_file(options.from_path));
  } catch (const ScheduleFormatError& error) {
    throw std::invalid_argument(options.from_path + ": " + error.what());
  }
  if (options.ranks && *options.ranks != schedule.ranks) {
    throw std::invalid_argument("--pp " + std::to_string(*options.ranks) + " but " + options.from_path + " has " +
                                std::to_string(schedule.ranks) + " ranks: drop --pp or fix the file");
  }
  if (options.micro_batches && *options.micro_batches != schedule.micro_batches) {
    throw std::invalid_argument("--micro-batches " + std::to_string(*options.micro_batches) + " but " + options.from_path +
                                " has " + std::to_string(schedule.micro_batches) +
                                " micro-batches: drop --micro-batches or fix the file");
  }
  return schedule;
}

PipelineSchedule obtain_schedule(const ScheduleCommandOptions& options) {
  if (!options.from_path.empty()) return read_schedule(options);
  if (options.schedule_name.empty()) throw std::invalid_argument("missing --schedule NAME (or --from FILE)");
  if (!options.ranks) throw std::invalid_argument("missing --pp P, the number of pipeline ranks (or --from FILE)");
  if (!options.micro_batches) throw std::invalid_argument("missing --micro-batches M (or --from FILE)");
  return generate_pipeline_schedule(options.schedule_name, *options.ranks, *options.micro_batches);
}

PipelineSchedule without_communication(const PipelineSchedule& schedule) {
  PipelineSchedule compute = schedule;
  for (RankActions& rank : compute.actions) {
    std::erase_if(rank, [](const std::optional<PipelineAction>& action) { return action && action->is_communication(); });
  }
  return compute;
}

// The rank lines of the text form (its '#' header line left out), indented.
void print_rank_lines(const PipelineSchedule& schedule) {
  const std::string text = format_pipeline_schedule(schedule);
  std::size_t begin = text.find('\n') + 1;
  while (begin < text.size()) {
    const std::size_t end = text.find('\n', begin);
    std::printf("  %s\n", text.substr(begin, end - begin).c_str());
    begin = end + 1;
  }
}

// The lowered lists' simulation; `overlapped` is the compute-only schedule's, where no receive waits
// before its compute action needs it (the receive-first order for rendezvous sends can cost time).
void print_simulation(const PipelineSchedule& schedule, const PipelineCosts& costs, const PipelineSimulation& simulation,
                      const PipelineSimulation& overlapped) {
  double work_per_rank = 0;
  for (const StageSimulation& stage : simulation.stages) work_per_rank += stage.busy;
  work_per_rank /= schedule.ranks;
  std::printf("\nmakespan %g time units (%g of work per rank)", simulation.makespan, work_per_rank);
  if (overlapped.makespan < simulation.makespan) {
    std::printf("; %g with transfers overlapped (the receive-first order costs %g)", overlapped.makespan,
                simulation.makespan - overlapped.makespan);
  }
  std::printf("\n");
  std::printf("bubble %.1f%% of all ranks' time", 100 * simulation.bubble_fraction);
  if (const std::optional<BubbleTheory> theory = theoretical_bubble(schedule, costs)) {
    std::printf(" (theory %.1f%%: %s)", 100 * theory->fraction, theory->formula.c_str());
  }
  std::printf("\n\nstage  rank   busy  bubble  peak in flight  peak held\n");
  for (const StageSimulation& stage : simulation.stages) {
    std::printf("%5d  %4d  %5g  %5.1f%%  %14d  %9lld\n", stage.stage, stage.rank, stage.busy, 100 * stage.bubble_fraction,
                stage.peak_in_flight, static_cast<long long>(stage.peak_activation_bytes));
  }
  std::printf("(in flight: F done, B or I not; held: in flight plus I done, W not, in micro-batches)\n");
}

}  // namespace

void add_schedule_command(CLI::App& app, ScheduleCommandOptions& options) {
  CLI::App* command = app.add_subcommand("schedule", "Generate, validate and simulate a pipeline-parallel schedule");
  command->add_option("--pp", options.ranks, "Pipeline ranks P (stage s runs on rank s % P)");
  command->add_option("--micro-batches", options.micro_batches, "Micro-batches M per step");
  command->add_option("--schedule", options.schedule_name, "gpipe, 1f1b, 1f1b-deep, interleaved:V or zb-h1");
  command->add_option("--costs", options.costs,
                      "F,B[,W] time per forward, backward (input gradient) and weight gradient; default 1,1 (1,1,1 for zb-h1)");
  command->add_option("--trace", options.trace_path, "Write the simulated timeline as Chrome trace JSON (Perfetto)");
  command->add_option("--csv", options.csv_path, "Write the compute schedule as CSV (PyTorch's format: a row per rank)");
  command->add_option("--from", options.from_path, "Read a schedule (text or CSV) instead of generating one")
      ->check(CLI::ExistingFile);
}

int run_schedule_command(const ScheduleCommandOptions& options) {
  const PipelineSchedule schedule = obtain_schedule(options);
  const PipelineSchedule compute = schedule.has_communication() ? without_communication(schedule) : schedule;
  const PipelineCosts costs = options.costs.empty() ? unit_pipeline_costs(schedule) : PipelineCosts::parse(options.costs);
  const PipelineSchedule lowered = lower_pipeline_communication(schedule, costs);

  std::printf("ferry schedule %s: %d ranks, %d stages (%d per rank), %d micro-batches; costs F=%g B=%g W=%g\n",
              schedule.name.c_str(), schedule.ranks, schedule.stages, schedule.stages_per_rank(), schedule.micro_batches,
              costs.forward, costs.backward, costs.weight);
  std::printf("\ncompute actions per rank (%s, '-' = bubble):\n",
              schedule.has_communication() ? "from the lowered lists" : "one column per unit time slot");
  print_rank_lines(compute);
  std::printf("\nwith sends and receives (%s):\n", schedule.has_communication()
                                                       ? "as given"
                                                       : "odd ranks receive first where two neighbours would both send");
  print_rank_lines(lowered);

  const ScheduleValidation validation = validate_pipeline_schedule(lowered);
  if (!validation.ok()) {
    std::printf("\nvalidation: %zu problems\n", validation.problems.size());
    for (std::size_t index = 0; index < std::min(validation.problems.size(), kProblemsShown); ++index) {
      std::printf("  - %s\n", validation.problems[index].c_str());
    }
    if (validation.problems.size() > kProblemsShown) std::printf("  ... and %zu more\n", validation.problems.size() - kProblemsShown);
    throw std::runtime_error("the schedule is not valid: " + validation.problems.front() +
                             (validation.problems.size() > 1 ? " (and " + std::to_string(validation.problems.size() - 1) + " more above)" : "") +
                             "; fix the listed actions or generate one with --schedule");
  }
  std::printf("\nvalidation: ok (buffered and rendezvous sends)\n");

  const PipelineSimulation simulation = simulate_pipeline_schedule(lowered, costs);
  print_simulation(schedule, costs, simulation, simulate_pipeline_schedule(compute, costs));
  if (!options.trace_path.empty()) {
    write_file_atomically(options.trace_path, pipeline_simulation_trace(lowered, simulation));
    std::printf("trace: %s (open in https://ui.perfetto.dev)\n", options.trace_path.c_str());
  }
  if (!options.csv_path.empty()) {
    write_file_atomically(options.csv_path, format_pipeline_schedule_csv(compute));
    std::printf("csv: %s\n", options.csv_path.c_str());
  }
  return 0;
}

}  // namespace ferry
