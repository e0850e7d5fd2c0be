#include "engine/cli/bench_memory.h"
#include "engine/cli/bench_zero.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "allocator/byte_size.h"
#include "engine/core/atomic_file.h"
#include "engine/cli/run_input.h"
#include "engine/report/summary_file.h"
#include "engine/train/model_config.h"
#include "engine/data/token_data.h"
#include "engine/train/training_setup.h"
#include "engine/train/training_step.h"
#include "models/activation_memory.h"

namespace ferry {
namespace {

using nlohmann::json;

// Forward FLOPs of one micro-batch: every block, and the tied LM head.
double forward_flops(const GptConfig& config, std::int64_t batch, std::int64_t sequence) {
  const double blocks = static_cast<double>(config.layers) * block_recompute_flops(config, batch, sequence, ActivationKeep::input_only);
  return blocks + 2.0 * static_cast<double>(batch * sequence) * static_cast<double>(config.hidden * config.vocab);
}

// Korthikanti et al.: sbh(34 + 5as/h) bytes per layer with 16-bit activations (selective 34sbh, full
// 2sbh), scaled by element_bytes / 2 for other precisions.
double korthikanti_activation_bytes(const GptConfig& config, std::int64_t batch, std::int64_t sequence, std::int64_t element_bytes,
                                    ActivationKeep keep) {
  const double sbh = static_cast<double>(sequence * batch * config.hidden);
  const double per_layer = keep == ActivationKeep::all ? sbh * (34.0 + 5.0 * static_cast<double>(config.heads * sequence) / static_cast<double>(config.hidden))
                           : keep == ActivationKeep::selective ? 34.0 * sbh
                                                               : 2.0 * sbh;
  return static_cast<double>(config.layers) * per_layer * static_cast<double>(element_bytes) / 2.0;
}

// Writes the result's table to stdout, and `stem`.csv and `stem`.json (plus the --summary copy).
void write_bench_outputs(const BenchMemoryOptions& options, const json& result, const std::string& stem, const std::string& table,
                         const std::string& csv) {
  std::fputs(table.c_str(), stdout);
  std::error_code error;
  std::filesystem::create_directories(options.output, error);
  if (error) throw FileError(options.output, 0, "cannot create the output directory: " + error.message());
  const std::filesystem::path directory(options.output);
  write_file_atomically((directory / (stem + ".csv")).string(), csv);
  write_summary_file((directory / (stem + ".json")).string(), result);
  if (!options.summary.empty()) write_summary_file(options.summary, result);
}

// The measured row of `checkpointing` as a run to compare.
RunMemory bench_row_run_memory(const json& result, const std::string& checkpointing) {
  for (const json& row : result["rows"]) {
    if (row["kind"] != "measured" || row["checkpointing"] != checkpointing) continue;
    const json summary = {{"model", result["model"]},
                          {"run", {{"device", "meta (ferry bench memory, checkpointing " + checkpointing + ")"}, {"precision", result["run"]["precision"]}}},
                          {"memory", {{"peak_allocated", row["peak_allocated"]}, {"peak_reserved", row["peak_reserved"]}, {"at_peak", row["at_peak"]}}}};
    return run_memory_from_summary("ferry bench memory", summary);
  }
  throw std::logic_error("ferry bench memory has no measured row with checkpointing " + checkpointing);
}

int run_bench_pipeline_command(const BenchMemoryOptions& options) {
  const json result = bench_pipeline_memory(options.run, options.pipeline);
  write_bench_outputs(options, result, "pipeline", bench_pipeline_table(result), bench_pipeline_csv(result));
  std::printf("\n  wrote %s/pipeline.csv and pipeline.json\n", options.output.c_str());
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, BenchMemoryOptions& o) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* memory = bench->add_subcommand("memory", "Peak memory of a training step per configuration (dry runs), beside theory");
  memory->add_option("--model", o.run.model, "Preset (gpt2-tiny, gpt2, ..., gpt3-175b)");
  memory->add_option("--layers", o.run.layers, "Transformer blocks (overrides the preset)");
  memory->add_option("--hidden", o.run.hidden, "Hidden width (overrides the preset)");
  memory->add_option("--heads", o.run.heads, "Attention heads (overrides the preset)");
  memory->add_option("--vocab", o.run.vocab, "Vocabulary size (overrides the preset)");
  memory->add_option("--batch", o.run.batch, "Micro-batch size (default 8)");
  memory->add_option("--seq", o.run.seq, "Sequence length (default: the model's positions)");
  memory->add_option("--grad-accum", o.run.grad_accum, "Micro-batches per step");
  memory->add_option("--precision", o.run.precision, "fp32 | bf16 | fp16");
  memory->add_option("--loss-chunk", o.run.loss_chunk, "Tokens per LM-head chunk (0: automatic)");
  memory->add_option("--kernels", o.run.device,
                     "Whose kernels' allocations the dry runs make: cpu (default) or cuda (flash attention's log-sum-exps, "
                     "cuBLASLt's workspace)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  memory->add_option("--output", o.output, "Directory for memory.csv, memory.json and memory.html (default ferry-bench-memory)");
  memory->add_option("--summary", o.summary, "Also write the JSON here");
  memory->add_option("--baseline", o.baseline,
                     "Compare the no-recompute row with this run (a profile directory, a PyTorch snapshot or a --summary JSON)");
  memory->add_option("--dp", o.dp, "Data-parallel ranks: with --zero-stage, every rank's peak per ZeRO stage instead");
  memory->add_option("--zero-stage", o.zero_stages, "ZeRO stages for --dp, e.g. 0,1,2,3")->delimiter(',');
  memory->add_option("--checkpointing", o.run.checkpointing, "Recompute policy of the --dp table (default none)");
  memory->add_option("--offload-optimizer", o.run.offload_optimizer, "The --dp table with ZeRO-Offload per rank: none | cpu");
  memory->add_option("--reduce-bucket-size", o.run.reduce_bucket_size, "Gradient buckets of the --dp table, in elements (default: the training default)");
  memory->add_option("--allgather-bucket-size", o.run.allgather_bucket_size, "Parameter all-gather buckets of the --dp table (default: the training default)");
  memory->add_option("--pp", o.pipeline.pipeline_stages, "Pipeline stages: benchmark the pipeline schedules instead (with --micro-batches)");
  memory->add_option("--micro-batches", o.pipeline.micro_batches, "Micro-batch counts for --pp, e.g. 8,16,32")->delimiter(',');
  memory->add_option("--schedules", o.pipeline.schedules, "Schedules for --pp (default gpipe,1f1b,1f1b-deep,interleaved:2,zb-h1)")->delimiter(',');
}

bool bench_memory_requested(const CLI::App& app) {
  return app.got_subcommand("bench") && app.get_subcommand("bench")->got_subcommand("memory");
}

json bench_memory(const BenchMemoryOptions& options) {
  const TrainOptions& o = options.run;
  if (o.batch <= 0 || o.grad_accum <= 0) throw std::invalid_argument("--batch and --grad-accum must be positive");
  const GptConfig config = resolve_model_config(o);
  const std::int64_t sequence = o.seq.value_or(config.max_sequence);
  const DType dtype = parse_precision(o.precision);
  const std::int64_t element_bytes = static_cast<std::int64_t>(dtype_size(dtype));
  const TokenDataset data = TokenDataset::embedded_corpus();
  DryRunSetup setup{config, dtype, {}, &data, StepSettings{o.batch, sequence, o.grad_accum, 0, 1.0}, {}, o.loss_chunk,
                    AllocatorConfig::from_environment()};
  setup.kernels = parse_device_kind(o.device);
  const double step_flops = 3.0 * forward_flops(config, o.batch, sequence) * static_cast<double>(o.grad_accum);

  json rows = json::array();
  json baseline;
  for (const RecomputePolicy& policy : recompute_overview(config.layers)) {
    setup.policy = policy;
    const DryRun dry_run = dry_run_step(setup);
    const double recomputed = recompute_flops(config, o.batch, sequence, policy) * static_cast<double>(o.grad_accum);
    std::int64_t formula_bytes = 0;
    for (ActivationKeep keep : activation_keeps(policy, config.layers)) {
      formula_bytes += block_activation_bytes(config, o.batch, sequence, element_bytes, keep);
    }
    const std::array<std::int64_t, kNumMemoryCategories> peaks = category_peaks(dry_run.statistics);
    const std::int64_t activation_peak = peaks[category_index(MemoryCategory::activations)];
    json row = {{"name", "checkpointing " + policy.name()}, {"kind", "measured"}, {"checkpointing", policy.name()},
                {"peak_allocated", dry_run.peak_allocated}, {"peak_reserved", dry_run.peak_reserved},
                {"at_peak", bytes_by_category(dry_run.statistics.category_allocated_at_peak)}, {"max_by_category", bytes_by_category(peaks)},
                {"activation_peak", activation_peak}, {"kept_activations_formula", formula_bytes},
                {"recompute_flops", recomputed}, {"recompute_flops_fraction", recomputed / step_flops}};
    if (baseline.is_null()) baseline = row;
    row["ratio_to_baseline"] = static_cast<double>(dry_run.peak_allocated) / baseline["peak_allocated"].get<double>();
    row["activation_reduction"] = baseline["activation_peak"].get<double>() / static_cast<double>(std::max<std::int64_t>(activation_peak, 1));
    rows.push_back(row);
  }
  // Theory: ZeRO's model states (2 + 2 + 12 bytes per parameter in mixed precision; 4 + 4 + 8 in fp32)
  // plus Korthikanti's activations for the same shape.
  const double model_states = 16.0 * static_cast<double>(config.parameter_count());
  for (const auto& [name, keep] : {std::pair{"none", ActivationKeep::all}, std::pair{"selective", ActivationKeep::selective},
                                   std::pair{"full", ActivationKeep::input_only}}) {
    const double activations = korthikanti_activation_bytes(config, o.batch, sequence, element_bytes, keep);
    json at_peak = json::object();
    for (MemoryCategory category : kAllMemoryCategories) at_peak[std::string(category_name(category))] = 0;
    at_peak["optimizer_states"] = static_cast<std::int64_t>(model_states);  // parameters, gradients and optimizer together
    at_peak["activations"] = static_cast<std::int64_t>(activations);
    rows.push_back({{"name", std::string("theory ") + name + ": ZeRO 16 B/param + Korthikanti"}, {"kind", "theory"}, {"checkpointing", name},
                    {"peak_allocated", static_cast<std::int64_t>(model_states + activations)}, {"model_states", static_cast<std::int64_t>(model_states)},
                    {"activation_peak", static_cast<std::int64_t>(activations)}, {"at_peak", at_peak},
                    {"ratio_to_baseline", (model_states + activations) / baseline["peak_allocated"].get<double>()}});
  }
  return {{"command", "bench memory"},
          {"model", {{"name", config.name}, {"parameters", config.parameter_count()}, {"layers", config.layers}, {"hidden", config.hidden},
                     {"heads", config.heads}, {"vocab", config.vocab}}},
          {"run", {{"device", "meta"}, {"kernels", o.device}, {"precision", o.precision}, {"micro_batch", o.batch}, {"seq", sequence}, {"grad_accum", o.grad_accum},
                   {"loss_chunk_tokens", o.loss_chunk}, {"allocator", AllocatorConfig::from_environment().to_string()}}},
          {"step_flops", step_flops},
          {"rows", rows}};
}

std::string bench_memory_table(const json& result) {
  std::string out;
  char line[512];
  const json& run = result["run"];
  std::snprintf(line, sizeof line, "ferry bench memory: %s (%s parameters), %s, batch %s x seq %s x grad-accum %s; dry runs on meta\n",
                result["model"]["name"].get<std::string>().c_str(), std::to_string(result["model"]["parameters"].get<std::int64_t>()).c_str(),
                run["precision"].get<std::string>().c_str(), run["micro_batch"].dump().c_str(), run["seq"].dump().c_str(),
                run["grad_accum"].dump().c_str());
  out += line;
  std::snprintf(line, sizeof line, "\n  %-46s %11s %11s %11s %11s %11s %11s %8s %8s %9s\n", "configuration", "peak alloc", "peak resvd",
                "params", "grads", "optimizer", "activ. peak", "vs none", "activ. /", "recompute");
  out += line;
  for (const json& row : result["rows"]) {
    const bool measured = row["kind"] == "measured";
    const json& at_peak = row["at_peak"];
    auto bytes = [](const json& value) { return format_bytes(value.get<std::size_t>()); };
    char reduction[16] = "", flops[16] = "";
    if (measured) {
      std::snprintf(reduction, sizeof reduction, "%.2fx", row["activation_reduction"].get<double>());
      std::snprintf(flops, sizeof flops, "+%.1f%%", 100.0 * row["recompute_flops_fraction"].get<double>());
    }
    std::snprintf(line, sizeof line, "  %-46s %11s %11s %11s %11s %11s %11s %7.3fx %8s %9s\n", row["name"].get<std::string>().c_str(),
                  bytes(row["peak_allocated"]).c_str(), measured ? bytes(row["peak_reserved"]).c_str() : "",
                  measured ? bytes(at_peak["parameters"]).c_str() : "", measured ? bytes(at_peak["gradients"]).c_str() : "",
                  bytes(measured ? at_peak["optimizer_states"] : row["model_states"]).c_str(), bytes(row["activation_peak"]).c_str(),
                  row["ratio_to_baseline"].get<double>(), reduction, flops);
    out += line;
  }
  out += "\n  params/grads/optimizer: bytes at the peak; activ. peak: the activations category's own peak; vs none: peak allocated\n"
         "  against no recompute; activ. /: how many times smaller the activation peak is; recompute: extra FLOPs per step.\n"
         "  theory rows: 16 bytes per parameter for model states (in the optimizer column) + Korthikanti et al.'s activations.\n";
  return out;
}

std::string bench_memory_csv(const json& result) {
  std::string csv = "name,kind,checkpointing,peak_allocated,peak_reserved";
  for (MemoryCategory category : kAllMemoryCategories) csv += ",at_peak_" + std::string(category_name(category));
  csv += ",activation_peak,ratio_to_baseline,activation_reduction,recompute_flops\n";
  for (const json& row : result["rows"]) {
    csv += row["name"].get<std::string>() + "," + row["kind"].get<std::string>() + "," + row["checkpointing"].get<std::string>() + "," +
           row["peak_allocated"].dump() + "," + row.value("peak_reserved", json("")).dump();
    for (MemoryCategory category : kAllMemoryCategories) csv += "," + row["at_peak"][std::string(category_name(category))].dump();
    csv += "," + row["activation_peak"].dump() + "," + row["ratio_to_baseline"].dump() + "," + row.value("activation_reduction", json("")).dump() +
           "," + row.value("recompute_flops", json("")).dump() + "\n";
  }
  std::erase(csv, '"');
  return csv;
}

int run_bench_memory_command(const BenchMemoryOptions& options) {
  if (options.pipeline.pipeline_stages > 1) {
    if (options.run.device != "cpu") {
      throw std::invalid_argument("--kernels " + options.run.device + " with --pp: pipeline stages run on the cpu device only; drop --kernels");
    }
    return run_bench_pipeline_command(options);
  }
  if (!options.zero_stages.empty()) {
    const json zero = bench_zero(options);
    write_bench_outputs(options, zero, "zero", bench_zero_table(zero), bench_zero_csv(zero));
    std::printf("\n  wrote %s/zero.csv and zero.json\n", options.output.c_str());
    return 0;
  }
  const json result = bench_memory(options);
  write_bench_outputs(options, result, "memory", bench_memory_table(result), bench_memory_csv(result));
  write_file_atomically((std::filesystem::path(options.output) / "memory.html").string(), bench_memory_html(result));
  std::printf("\n  wrote %s/memory.csv, memory.json and memory.html\n", options.output.c_str());
  if (!options.baseline.empty()) {
    std::printf("\n");
    write_comparison(load_run_memory(options.baseline), bench_row_run_memory(result, "none"), options.output);
  }
  return 0;
}

}  // namespace ferry
