#include "engine/cli/bench_zero.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "allocator/byte_size.h"
#include "engine/report/model_state_report.h"
#include "engine/report/summary_file.h"
#include "engine/train/model_config.h"
#include "engine/data/token_data.h"
#include "engine/train/training_plan.h"
#include "engine/train/training_setup.h"
#include "engine/train/training_step.h"

namespace ferry {

using nlohmann::json;

namespace {

// Model-state bytes per rank by the published formulas, for Ψ parameters over N ranks.
struct ModelStateFormulas {
  double zero_paper;     // ZeRO (Rajbhandari et al.): fp16 parameters and gradients, K = 12
  double ferry_layout;   // ferry's: parameters in their dtype, f32 gradients, f32 master (16-bit only), m, v
  double deepspeed;      // DeepSpeed's estimate_zero2 (stages 1, 2) or estimate_zero3_model_states_mem_needs, or NaN
};

// `largest_layer`: the parameters of the largest layer, which DeepSpeed's stage-3 estimator counts
// gathered (the tied token table here).
ModelStateFormulas formulas(int stage, double psi, double n, double parameter_bytes, double largest_layer) {
  const double master = parameter_bytes == 4 ? 0 : 4;  // f32 parameters are their own master weights
  const double optimizer = master + 8;
  ModelStateFormulas f{};
  switch (stage) {
    case 0: f.zero_paper = 16 * psi; f.ferry_layout = (parameter_bytes + 4 + optimizer) * psi; break;
    case 1: f.zero_paper = 4 * psi + 12 * psi / n; f.ferry_layout = (parameter_bytes + 4) * psi + optimizer * psi / n; break;
    case 2: f.zero_paper = 2 * psi + 14 * psi / n; f.ferry_layout = parameter_bytes * psi + (4 + optimizer) * psi / n; break;
    default: f.zero_paper = 16 * psi / n; f.ferry_layout = (parameter_bytes + 4 + optimizer) * psi / n; break;
  }
  f.deepspeed = stage == 0 ? std::nan("") : stage == 3 ? deepspeed_zero3_estimate(psi, largest_layer, n, false) : 2 * psi + 18 * psi / n;
  return f;
}

}  // namespace

json bench_zero(const BenchMemoryOptions& options) {
  const TrainOptions& o = options.run;
  if (options.dp < 1) throw std::invalid_argument("--dp must be at least 1, got " + std::to_string(options.dp));
  if (o.batch <= 0 || o.grad_accum <= 0) throw std::invalid_argument("--batch and --grad-accum must be positive");
  const GptConfig config = resolve_model_config(o);
  const std::int64_t sequence = o.seq.value_or(config.max_sequence);
  const DType dtype = parse_precision(o.precision);
  const TokenDataset data = TokenDataset::embedded_corpus();
  const auto psi = static_cast<double>(config.parameter_count());
  const std::int64_t model_buckets = default_bucket_elements(config, GridShape{1, options.dp, 1});
  const std::int64_t reduce_buckets = o.reduce_bucket_size.value_or(model_buckets);
  const std::int64_t allgather_buckets = o.allgather_bucket_size.value_or(model_buckets);
  json rows = json::array();
  for (const int stage : options.zero_stages) {
    if (stage < 0 || stage > 3) throw std::invalid_argument("--zero-stage takes 0, 1, 2 and 3, not " + std::to_string(stage));
    DryRunSetup setup{config, dtype, {}, &data, StepSettings{o.batch, sequence, o.grad_accum, 0, 1.0}, RecomputePolicy::parse(o.checkpointing),
                      o.loss_chunk, AllocatorConfig::from_environment()};
    setup.kernels = parse_device_kind(o.device);
    setup.offload_optimizer = o.offload_optimizer != "none";
    setup.gradient_bucket_elements = reduce_buckets;
    // The tied table's handling as a training plan of this grid and stage chooses it.
    TrainingPlan plan;
    plan.model = config;
    plan.sequence = sequence;
    plan.micro_batch = o.batch;
    plan.grid.dp = options.dp;
    plan.zero_stage = stage;
    json ranks = json::array();
    json fullest;
    for (int rank = 0; rank < options.dp; ++rank) {
      setup.data_parallel = {rank, options.dp, stage, allgather_buckets, true, plan.tied_table_gradient()};
      const DryRun dry_run = dry_run_step(setup);
      const json at_peak = bytes_by_category(dry_run.statistics.category_allocated_at_peak);
      const json entry = {{"rank", rank}, {"peak_allocated", dry_run.peak_allocated}, {"peak_reserved", dry_run.peak_reserved},
                          {"at_peak", at_peak}, {"max_by_category", bytes_by_category(category_peaks(dry_run.statistics))}};
      if (fullest.is_null() || dry_run.peak_reserved > fullest["peak_reserved"].get<std::int64_t>()) fullest = entry;
      ranks.push_back(entry);
    }
    const json& peaks = fullest["max_by_category"];
    const std::int64_t model_states = peaks["parameters"].get<std::int64_t>() + peaks["gradients"].get<std::int64_t>() +
                                      peaks["optimizer_states"].get<std::int64_t>();
    const auto largest_layer = static_cast<double>(config.vocab * config.hidden);
    ModelStateFormulas f = formulas(stage, psi, options.dp, static_cast<double>(dtype_size(dtype)), largest_layer);
    if (setup.offload_optimizer) {
      // Offload: the optimizer state leaves the device; stage 1 keeps whole f32 gradients there, stage 2
      // streams the rank's reduced partition to the host (only the buckets in flight stay), stage 3 keeps
      // its partition of the parameters.
      const double parameter_bytes = static_cast<double>(dtype_size(dtype));
      f = {std::nan(""), parameter_bytes * psi / (stage == 3 ? options.dp : 1) + (stage >= 2 ? 0.0 : 4 * psi),
           stage == 3 ? deepspeed_zero3_estimate(psi, largest_layer, options.dp, true) : 2 * psi};
    }
    rows.push_back({{"zero_stage", stage}, {"fullest_rank", fullest["rank"]}, {"peak_allocated", fullest["peak_allocated"]},
                    {"peak_reserved", fullest["peak_reserved"]}, {"max_by_category", peaks}, {"model_states_measured", model_states},
                    {"zero_paper_model_states", std::isnan(f.zero_paper) ? json(nullptr) : json(f.zero_paper)}, {"ferry_layout_model_states", f.ferry_layout},
                    {"deepspeed_estimate_model_states", std::isnan(f.deepspeed) ? json(nullptr) : json(f.deepspeed)}, {"ranks", ranks}});
  }
  return {{"command", "bench memory --zero-stage"},
          {"model", {{"name", config.name}, {"parameters", config.parameter_count()}}},
          {"run", {{"dp", options.dp}, {"precision", o.precision}, {"micro_batch", o.batch}, {"seq", sequence}, {"grad_accum", o.grad_accum},
                   {"checkpointing", o.checkpointing}, {"kernels", o.device}, {"offload_optimizer", o.offload_optimizer},
                   {"reduce_bucket_elements", reduce_buckets}, {"allgather_bucket_elements", allgather_buckets}}},
          {"rows", rows}};
}

std::string bench_zero_table(const json& result) {
  std::string out;
  char line[512];
  const json& run = result["run"];
  std::snprintf(line, sizeof line, "ferry bench memory: %s (%s parameters), %s, dp %d, batch %s x seq %s x grad-accum %s, checkpointing %s%s; "
                "every rank dry-run on meta\n\n", result["model"]["name"].get<std::string>().c_str(),
                std::to_string(result["model"]["parameters"].get<std::int64_t>()).c_str(), run["precision"].get<std::string>().c_str(),
                run["dp"].get<int>(), run["micro_batch"].dump().c_str(), run["seq"].dump().c_str(), run["grad_accum"].dump().c_str(),
                run["checkpointing"].get<std::string>().c_str(), run["offload_optimizer"] == "none" ? "" : ", optimizer offloaded per rank");
  out += line;
  std::snprintf(line, sizeof line, "  %-5s %11s %11s %10s %10s %10s %10s %10s | %11s %11s %11s %11s\n", "ZeRO", "peak alloc", "peak resvd", "params",
                "grads", "optimizer", "activ.", "comm.", "model st.", "ferry form.", "ZeRO paper", "DeepSpeed");
  out += line;
  auto bytes = [](const json& value) {
    return value.is_null() || std::isnan(value.get<double>()) ? std::string("-") : format_bytes(static_cast<std::size_t>(value.get<double>()));
  };
  for (const json& row : result["rows"]) {
    const json& peaks = row["max_by_category"];
    std::snprintf(line, sizeof line, "  %-5d %11s %11s %10s %10s %10s %10s %10s | %11s %11s %11s %11s\n", row["zero_stage"].get<int>(),
                  bytes(row["peak_allocated"]).c_str(), bytes(row["peak_reserved"]).c_str(), bytes(peaks["parameters"]).c_str(),
                  bytes(peaks["gradients"]).c_str(), bytes(peaks["optimizer_states"]).c_str(), bytes(peaks["activations"]).c_str(),
                  bytes(peaks["communication"]).c_str(), bytes(row["model_states_measured"]).c_str(),
                  bytes(row["ferry_layout_model_states"]).c_str(), bytes(row["zero_paper_model_states"]).c_str(),
                  bytes(row["deepspeed_estimate_model_states"]).c_str());
    out += line;
  }
  out += "\n  The fullest rank's peaks; params/grads/optimizer/activ./comm.: each category's own peak on that rank. model st.: params +\n"
         "  grads + optimizer measured; ferry form.: the same from ferry's layout (f32 gradients; f32 master for 16-bit parameters);\n"
         "  ZeRO paper: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N (fp16 gradients); DeepSpeed: estimate_zero2_model_states_mem_needs,\n"
         "  2Ψ + 18Ψ/N, and estimate_zero3_model_states_mem_needs, 4 x the largest layer (the gathered table) + 18Ψ/N.\n"
         "  The formulas count model states only; the peak adds activations, gradient buckets, the all-gather's buffers and (stage\n"
         "  3) the gathered layers beyond the largest.\n";
  return out;
}

std::string bench_zero_csv(const json& result) {
  std::string csv = "zero_stage,fullest_rank,peak_allocated,peak_reserved,parameters,gradients,optimizer_states,activations,communication,"
                    "model_states_measured,ferry_layout_model_states,zero_paper_model_states,deepspeed_estimate_model_states\n";
  for (const json& row : result["rows"]) {
    const json& peaks = row["max_by_category"];
    csv += row["zero_stage"].dump() + "," + row["fullest_rank"].dump() + "," + row["peak_allocated"].dump() + "," + row["peak_reserved"].dump() + "," +
           peaks["parameters"].dump() + "," + peaks["gradients"].dump() + "," + peaks["optimizer_states"].dump() + "," +
           peaks["activations"].dump() + "," + peaks["communication"].dump() + "," + row["model_states_measured"].dump() + "," +
           row["ferry_layout_model_states"].dump() + "," + row["zero_paper_model_states"].dump() + "," +
           row["deepspeed_estimate_model_states"].dump() + "\n";
  }
  return csv;
}

}  // namespace ferry
