// `ferry bench memory --pp P --micro-batches M1,M2,...`: each pipeline schedule's per-stage peak memory
// for one step, measured by dry runs of every stage on meta devices in one process, beside the
// formulas: GPipe stashes m micro-batches per stage, early backward p - s on stage s, and the bubble
// (p - 1)/(m + p - 1) of the unit-cost simulation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/train/train_options.h"

namespace ferry {

struct BenchPipelineOptions {
  std::int32_t pipeline_stages = 1;
  std::vector<std::int64_t> micro_batches;  // each count benchmarked
  std::vector<std::string> schedules = {"gpipe", "1f1b", "1f1b-deep", "interleaved:2", "zb-h1"};
};

nlohmann::json bench_pipeline_memory(const TrainOptions& run, const BenchPipelineOptions& options);
std::string bench_pipeline_table(const nlohmann::json& result);
std::string bench_pipeline_csv(const nlohmann::json& result);

}  // namespace ferry
