// `ferry bench memory`: peak memory of one training step under each configuration, by dry runs on
// the meta device (exact allocator peaks, no compute): the baseline (no recompute, optimizer on the
// device) and every recompute policy, beside the published formulas (ZeRO's 16 bytes per parameter
// for model states, Korthikanti et al.'s activations). A table, CSV, JSON and an HTML/SVG chart.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cli/bench_pipeline.h"
#include "engine/train/train_options.h"

namespace CLI {
class App;
}

namespace ferry {

struct BenchMemoryOptions {
  TrainOptions run;  // model shape, batch, seq, grad-accum, precision, loss chunk
  std::string output = "ferry-bench-memory";  // memory.csv, memory.json, memory.html
  std::string summary;
  BenchPipelineOptions pipeline;  // --pp P --micro-batches M,...: the schedules' table instead
  // --dp N --zero-stage 0,1,2: every rank's peak per ZeRO stage instead (bench_zero.h)
  int dp = 1;
  std::vector<int> zero_stages;
  // A run to compare with the no-recompute row (a profile, a PyTorch snapshot or a summary JSON):
  // compare.json and compare.html in `output`.
  std::string baseline;
};

void add_bench_command(CLI::App& app, BenchMemoryOptions& options);
bool bench_memory_requested(const CLI::App& app);

// The rows (measured, then theory) as JSON; prints nothing.
nlohmann::json bench_memory(const BenchMemoryOptions& options);
std::string bench_memory_table(const nlohmann::json& result);
std::string bench_memory_csv(const nlohmann::json& result);
std::string bench_memory_html(const nlohmann::json& result);

int run_bench_memory_command(const BenchMemoryOptions& options);

}  // namespace ferry
