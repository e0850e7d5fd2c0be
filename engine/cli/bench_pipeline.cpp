#include "engine/cli/bench_pipeline.h"

#include <algorithm>
#include <cstdio>

#include "allocator/byte_size.h"
#include "engine/train/trainer.h"

namespace ferry {
namespace {

using nlohmann::json;

std::int64_t activation_peak(const json& rank) { return rank["max_by_category"]["activations"].get<std::int64_t>(); }

}  // namespace

json bench_pipeline_memory(const TrainOptions& run, const BenchPipelineOptions& options) {
  const std::int32_t p = options.pipeline_stages;
  if (p < 2) throw std::invalid_argument("--pp must be >= 2 for the pipeline benchmark, got " + std::to_string(p));
  if (options.micro_batches.empty()) throw std::invalid_argument("--micro-batches needs at least one count, e.g. 8,16,32");
  json rows = json::array();
  for (const std::int64_t m : options.micro_batches) {
    json gpipe_stage0 = nullptr;
    for (const std::string& schedule : options.schedules) {
      TrainOptions o = run;
      o.device = "meta";
      o.device_memory = "1024TiB";  // a dry run measures; it does not enforce a limit
      o.steps = 1;
      o.pipeline_stages = p;
      o.micro_batches = m;
      o.grad_accum = 1;
      o.schedule = schedule;
      o.quiet = true;
      json summary;
      try {
        summary = run_training(o);
      } catch (const std::invalid_argument& error) {  // e.g. interleaved with m not a multiple of p
        rows.push_back({{"micro_batches", m}, {"schedule", schedule}, {"skipped", error.what()}});
        continue;
      }
      json stages = json::array();
      for (const json& rank : summary["ranks"]) {
        stages.push_back({{"rank", rank["rank"]}, {"peak_allocated", rank["peak_allocated"]}, {"peak_reserved", rank["peak_reserved"]},
                          {"activation_peak", activation_peak(rank)}, {"stash_peak", rank["activation_stash"]["peak"]},
                          {"stash_one_micro_batch", rank["activation_stash"]["one_micro_batch"]},
                          {"stash_predicted", rank["activation_stash"]["predicted_peak"]}});
      }
      const double theory_bubble = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      json row = {{"micro_batches", m}, {"schedule", schedule}, {"stages", stages},
                  {"simulated_bubble", summary["pipeline"]["unit_cost_simulation"]["bubble_fraction"]},
                  {"theory_bubble", theory_bubble}};
      const std::int64_t stage0 = stages[0]["activation_peak"].get<std::int64_t>();
      if (schedule == "gpipe") gpipe_stage0 = stage0;
      if (!gpipe_stage0.is_null()) row["stage0_activation_vs_gpipe"] = static_cast<double>(stage0) / gpipe_stage0.get<double>();
      // The goal: early backward stashes p micro-batches on stage 0 instead of m, plus one working set.
      if (schedule == "1f1b") row["goal_vs_gpipe"] = static_cast<double>(p + 1) / static_cast<double>(m + 1);
      rows.push_back(row);
    }
  }
  return {{"pp", p}, {"rows", rows}};
}

std::string bench_pipeline_table(const json& result) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "\n  pipeline schedules, --pp %d (dry runs of every stage on meta; bubble: unit-cost simulation)\n",
                result["pp"].get<int>());
  out += line;
  std::snprintf(line, sizeof line, "  %4s %-14s %-44s %9s %9s %12s\n", "m", "schedule", "activation peak per stage (stage 0 first)", "bubble",
                "theory", "stage 0 / gpipe");
  out += line;
  for (const json& row : result["rows"]) {
    if (row.contains("skipped")) {
      std::snprintf(line, sizeof line, "  %4lld %-14s skipped: %s\n", static_cast<long long>(row["micro_batches"].get<std::int64_t>()),
                    row["schedule"].get<std::string>().c_str(), row["skipped"].get<std::string>().c_str());
      out += line;
      continue;
    }
    std::string peaks;
    for (const json& stage : row["stages"]) peaks += (peaks.empty() ? "" : " ") + format_bytes(stage["activation_peak"].get<std::size_t>());
    char ratio[48] = "";
    if (row.contains("goal_vs_gpipe")) {
      std::snprintf(ratio, sizeof ratio, "%.3f (goal <= %.3f)", row["stage0_activation_vs_gpipe"].get<double>(), row["goal_vs_gpipe"].get<double>());
    } else if (row.contains("stage0_activation_vs_gpipe")) {
      std::snprintf(ratio, sizeof ratio, "%.3f", row["stage0_activation_vs_gpipe"].get<double>());
    }
    std::snprintf(line, sizeof line, "  %4lld %-14s %-44s %8.1f%% %8.1f%% %s\n", static_cast<long long>(row["micro_batches"].get<std::int64_t>()),
                  row["schedule"].get<std::string>().c_str(), peaks.c_str(), 100.0 * row["simulated_bubble"].get<double>(),
                  100.0 * row["theory_bubble"].get<double>(), ratio);
    out += line;
  }
  out += "  theory bubble: (p-1)/(m+p-1) for GPipe and 1F1B; interleaved and Zero Bubble aim below it.\n";
  return out;
}

std::string bench_pipeline_csv(const json& result) {
  std::string csv = "micro_batches,schedule,stage,peak_allocated,peak_reserved,activation_peak,stash_peak,stash_predicted,simulated_bubble,theory_bubble\n";
  for (const json& row : result["rows"]) {
    if (row.contains("skipped")) continue;
    for (const json& stage : row["stages"]) {
      csv += row["micro_batches"].dump() + "," + row["schedule"].get<std::string>() + "," + stage["rank"].dump() + "," +
             stage["peak_allocated"].dump() + "," + stage["peak_reserved"].dump() + "," + stage["activation_peak"].dump() + "," +
             stage["stash_peak"].dump() + "," + stage["stash_predicted"].dump() + "," + row["simulated_bubble"].dump() + "," +
             row["theory_bubble"].dump() + "\n";
    }
  }
  return csv;
}

}  // namespace ferry
