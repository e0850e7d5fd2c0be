#include "engine/cli/train_command.h"

#include <nlohmann/json.hpp>

#include "engine/cli/auto_plan.h"
#include "engine/core/atomic_file.h"
#include "engine/plan/memory_advice.h"
#include "engine/report/summary_file.h"
#include "engine/train/trainer.h"

namespace ferry {

int run_train_command(const TrainOptions& options) {
  // Outputs are checked before the run, so a long run does not lose them at its end.
  if (!options.summary.empty()) check_output_file(options.summary, "--summary");
  if (!options.save.empty()) check_output_directory(options.save, "--save");
  if (options.plan_path == "auto") {
    const AutoPlan plan = resolve_auto_plan(options);
    nlohmann::json summary = run_training(plan.options, advise_out_of_memory);
    if (!summary.is_null()) summary["plan"] = plan.record;
    if (!options.summary.empty() && !summary.is_null()) write_summary_file(options.summary, summary);  // null: not rank 0
    return 0;
  }
  const nlohmann::json summary = run_training(options, advise_out_of_memory);
  if (!options.summary.empty() && !summary.is_null()) write_summary_file(options.summary, summary);  // null: not rank 0
  return 0;
}

int run_eval_command(const EvalOptions& options) {
  if (!options.summary.empty()) check_output_file(options.summary, "--summary");
  const nlohmann::json summary = run_evaluation(options);
  if (!options.summary.empty()) write_summary_file(options.summary, summary);
  return 0;
}

}  // namespace ferry
