// `ferry bench memory --dp N --zero-stage 0,1,2,3`: every data-parallel rank's whole training step per
// ZeRO stage, by dry runs on meta (exact allocator peaks), beside ZeRO's model-state formulas, ferry's
// own layout's formula and DeepSpeed's estimator (which count model states only).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/cli/bench_memory.h"

namespace ferry {

nlohmann::json bench_zero(const BenchMemoryOptions& options);
std::string bench_zero_table(const nlohmann::json& result);
std::string bench_zero_csv(const nlohmann::json& result);

}  // namespace ferry
