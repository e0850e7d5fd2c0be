#include "engine/cli/plan_command.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>

#include "allocator/byte_size.h"
#include "engine/plan/cpu_calibration.h"
#include "engine/report/summary_file.h"

namespace ferry {

using nlohmann::json;

namespace {

int machine_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// The bytes free to an unprivileged writer in the file system holding `directory`.
std::size_t free_bytes_of(const std::string& directory) {
  struct statvfs fs{};
  if (statvfs(directory.c_str(), &fs) != 0) {
    throw std::invalid_argument("--nvme-path '" + directory + "': " + std::strerror(errno) + " (give an existing directory on the NVMe drive)");
  }
  return static_cast<std::size_t>(fs.f_bavail) * static_cast<std::size_t>(fs.f_frsize);
}

// The `ferry train` flags of the model the plan is for, as the user gave them.
std::vector<std::string> model_flags(const TrainOptions& model) {
  std::vector<std::string> flags = {"--model", model.model};
  auto add = [&](const char* flag, const std::optional<std::int64_t>& value) {
    if (value) flags.insert(flags.end(), {flag, std::to_string(*value)});
  };
  add("--layers", model.layers);
  add("--hidden", model.hidden);
  add("--heads", model.heads);
  add("--vocab", model.vocab);
  add("--seq", model.seq);
  if (model.precision != "fp32") flags.insert(flags.end(), {"--precision", model.precision});
  return flags;
}

std::string command_line(const PlanSearchRequest& request, const PlanCandidate& candidate) {
  std::vector<std::string> words = {"mpirun", "-np", std::to_string(request.cluster.world()), "ferry", "train"};
  for (const std::string& flag : model_flags(request.base)) words.push_back(flag);
  for (const std::string& flag : candidate.settings.flags()) words.push_back(flag);
  if (candidate.settings.nvme) words.insert(words.end(), {"--nvme-path", request.base.nvme_path});
  words.insert(words.end(), {"--device", candidate.options.device, "--device-memory", candidate.options.device_memory});
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

// DeepSpeed's keys for what they share, the rest under "ferry" (what `ferry train --config` reads).
json deepspeed_config(const PlanSearchRequest& request, const PlanCandidate& candidate) {
  const PlanSettings& s = candidate.settings;
  json config = {{"train_batch_size", request.global_batch}, {"train_micro_batch_size_per_gpu", s.micro_batch},
                 {"gradient_accumulation_steps", s.micro_batches}, {"zero_optimization", {{"stage", s.zero_stage}}}};
  if (s.nvme) {
    config["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", request.base.nvme_path}};
  } else if (s.offload_optimizer) {
    config["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  }
  if (s.offload_parameters) config["zero_optimization"]["offload_param"] = {{"device", "cpu"}};
  if (request.base.precision == "bf16") config["bf16"] = {{"enabled", true}};
  if (request.base.precision == "fp16") config["fp16"] = {{"enabled", true}};
  config["ferry"] = {{"pp", s.pp}, {"checkpointing", s.recompute}, {"device", candidate.options.device}, {"device_memory", candidate.options.device_memory}};
  return config;
}

}  // namespace

void add_plan_command(CLI::App& app, PlanCommandOptions& o) {
  CLI::App* plan = app.add_subcommand("plan", "Search the grid, micro-batch, recompute, ZeRO stage and offload for a model on a cluster: "
                                              "exact per-rank memory by dry runs, ranked by a stated step-time model");
  plan->add_option("--model", o.model.model, "Preset: gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-small ... gpt3-175b");
  plan->add_option("--layers", o.model.layers, "Transformer blocks (overrides the preset)");
  plan->add_option("--hidden", o.model.hidden, "Hidden width (overrides the preset)");
  plan->add_option("--heads", o.model.heads, "Attention heads (overrides the preset)");
  plan->add_option("--vocab", o.model.vocab, "Vocabulary size (overrides the preset)");
  plan->add_option("--seq", o.model.seq, "Sequence length (default: the model's positions)");
  plan->add_option("--precision", o.model.precision, "fp32 | bf16 | fp16");
  plan->add_option("--global-batch", o.global_batch, "Sequences per optimizer step, over every data-parallel rank")->required();
  plan->add_option("--cluster", o.cluster, "NODESxDEVICESxKIND (KIND: H100-80GB, H200-141GB, A100-80GB, A100-40GB, cpu) or local (this machine's cpu ranks)");
  plan->add_option("--ranks", o.ranks, "--cluster local: cpu ranks (default: the cores)");
  plan->add_option("--device-memory", o.device_memory, "Each device's memory (overrides the preset; cpu: the --device-memory each rank gets)");
  plan->add_option("--host-memory", o.host_memory, "Each node's host memory (overrides the preset): it holds an offloaded optimizer's state and gradients, and cpu devices' memory");
  plan->add_option("--nvme-path", o.model.nvme_path, "A directory on NVMe for offloaded optimizer state: plans may put it there (cpu clusters: its free space is --nvme)");
  plan->add_option("--nvme", o.nvme, "Each node's NVMe bytes for offloaded state (overrides the preset or --nvme-path's free space; 0: none)");
  plan->add_option("--nvme-bandwidth", o.nvme_bandwidth, "Bytes/s of each node's NVMe, read or write (overrides the preset)");
  plan->add_option("--peak-flops", o.peak_flops, "Each device's dense FLOP/s (overrides the preset, or the measured cpu rate)");
  plan->add_option("--efficiency", o.efficiency, "The share of --peak-flops a training step sustains (default: 0.45 on GPUs, 0.5 on cpu)");
  plan->add_option("--intra-node-bandwidth", o.intra_node_bandwidth, "Bytes/s per device of collectives inside a node");
  plan->add_option("--inter-node-bandwidth", o.inter_node_bandwidth, "Bytes/s per device of collectives across nodes");
  plan->add_option("--top", o.top, "Fitting plans to find (the search dry-runs plans in predicted order until this many fit)");
  plan->add_option("--max-dry-runs", o.max_dry_runs, "Dry runs of every rank the search may spend");
  plan->add_option("--summary", o.summary, "Write every plan as JSON here");
}

ClusterSpec plan_cluster(const PlanCommandOptions& o) {
  const int ranks = o.ranks.value_or(machine_cores());
  if (ranks < 1) throw std::invalid_argument("--ranks must be positive, got " + std::to_string(ranks));
  const bool cpu = o.cluster == "local" || o.cluster.ends_with("xcpu");
  ClusterSpec cluster = parse_cluster(o.cluster, ranks, cpu ? measure_cpu_gemm_flops() : 0.0);
  if (!o.device_memory.empty()) cluster.device_memory = parse_byte_size(o.device_memory);
  if (!o.host_memory.empty()) cluster.host_memory = parse_byte_size(o.host_memory);
  // Plans put the optimizer on NVMe only where they can train there: in --nvme-path's directory.
  if ((!o.nvme.empty() || o.nvme_bandwidth) && o.model.nvme_path.empty()) {
    throw std::invalid_argument(std::string(o.nvme.empty() ? "--nvme-bandwidth" : "--nvme " + o.nvme) +
                                ": plans with the optimizer on NVMe train in a directory there; give --nvme-path DIR too");
  }
  if (o.model.nvme_path.empty()) cluster.nvme_memory = 0;
  if (cpu && !o.model.nvme_path.empty()) cluster.nvme_memory = free_bytes_of(o.model.nvme_path);
  if (!o.nvme.empty()) cluster.nvme_memory = parse_byte_size(o.nvme);
  if (o.nvme_bandwidth) {
    cluster.nvme_bandwidth = *o.nvme_bandwidth;
  } else if (cpu && cluster.nvme_memory > 0) {  // this machine's drive, measured now
    cluster.nvme_bandwidth = measure_nvme_bandwidth(o.model.nvme_path);
    cluster.source += "; NVMe rate measured now through ferry's NvmeStore";
  }
  if (o.peak_flops) cluster.peak_flops = *o.peak_flops;
  if (o.efficiency) cluster.compute_efficiency = *o.efficiency;
  if (o.intra_node_bandwidth) cluster.intra_node_bandwidth = *o.intra_node_bandwidth;
  if (o.inter_node_bandwidth) cluster.inter_node_bandwidth = *o.inter_node_bandwidth;
  for (const auto& [value, flag] : {std::pair{cluster.peak_flops, "--peak-flops"}, {cluster.compute_efficiency, "--efficiency"},
                                    {cluster.intra_node_bandwidth, "--intra-node-bandwidth"}, {cluster.inter_node_bandwidth, "--inter-node-bandwidth"},
                                    {cluster.nvme_bandwidth, "--nvme-bandwidth"}}) {
    if (!(value > 0)) throw std::invalid_argument(std::string(flag) + " must be positive");
  }
  if (cluster.device_memory == 0) throw std::invalid_argument("--device-memory must be positive");
  return cluster;
}

json plan_summary(const PlanSearch& search, const PlanSearchRequest& request) {
  const ClusterSpec& c = request.cluster;
  json plans = json::array();
  for (const PlanCandidate& candidate : search.candidates) {
    const PlanSettings& s = candidate.settings;
    json plan = {{"settings", s.to_json()},
                 {"status", plan_status_name(candidate.status)}, {"fits", candidate.status == PlanCandidate::Status::fits},
                 {"why_not", candidate.why_not}, {"command", command_line(request, candidate)}};
    if (candidate.status != PlanCandidate::Status::refused) {
      plan["predicted_step_seconds"] = candidate.time.total();
      plan["predicted_parts"] = candidate.time.to_json();
      plan["tokens_per_second"] = candidate.tokens_per_second;
      plan["mfu"] = candidate.mfu;
      plan["model_states_floor"] = candidate.model_states_floor;
    }
    if (!candidate.ranks.is_null()) {
      plan["ranks"] = candidate.ranks;
      plan["fullest_rank"] = candidate.fullest_rank;
      plan["peak_reserved"] = candidate.peak_reserved;
      plan["headroom"] = static_cast<std::int64_t>(c.device_memory) - candidate.peak_reserved;
      plan["host_bytes"] = candidate.host_bytes;
      plan["nvme_bytes"] = candidate.nvme_bytes;
    }
    if (candidate.status == PlanCandidate::Status::fits) plan["deepspeed_config"] = deepspeed_config(request, candidate);
    plans.push_back(std::move(plan));
  }
  return {{"command", "plan"},
          {"cluster", {{"name", c.name}, {"device", c.device_name}, {"nodes", c.nodes}, {"devices_per_node", c.devices_per_node},
                       {"device_memory", c.device_memory}, {"host_memory", c.host_memory}, {"peak_flops", c.peak_flops},
                       {"compute_efficiency", c.compute_efficiency}, {"intra_node_bandwidth", c.intra_node_bandwidth},
                       {"inter_node_bandwidth", c.inter_node_bandwidth}, {"host_link_bandwidth", c.host_link_bandwidth},
                       {"device_memory_bandwidth", c.device_memory_bandwidth}, {"host_memory_bandwidth", c.host_memory_bandwidth},
                       {"nvme_memory", c.nvme_memory}, {"nvme_bandwidth", c.nvme_bandwidth}, {"call_seconds", c.call_seconds}, {"collective_seconds", c.collective_seconds}, {"source", c.source}}},
          {"global_batch", request.global_batch}, {"dry_runs", search.dry_runs}, {"search_seconds", search.seconds}, {"plans", plans}};
}

int run_plan_command(const PlanCommandOptions& options) {
  PlanSearchRequest request;
  request.base = options.model;
  request.base.model_given = true;
  request.cluster = plan_cluster(options);
  request.global_batch = options.global_batch;
  request.wanted = std::max<std::size_t>(options.top, 1);
  request.budget = std::max<std::size_t>(options.max_dry_runs, 1);
  const PlanSearch search = search_plans(request);
  const ClusterSpec& c = request.cluster;
  std::printf("ferry plan: %s on %s (%d x %d %s, %s each, %.3g FLOP/s x %.2f sustained), global batch %lld, %s\n", options.model.model.c_str(),
              c.name.c_str(), c.nodes, c.devices_per_node, c.device_name.c_str(), format_bytes(c.device_memory).c_str(), c.peak_flops,
              c.compute_efficiency, static_cast<long long>(request.global_batch), options.model.precision.c_str());
  std::printf("figures: %s\n", c.source.c_str());
  if (c.nvme_memory > 0) {
    std::printf("NVMe: %s a node at %.3g B/s, in %s\n", format_bytes(c.nvme_memory).c_str(), c.nvme_bandwidth, options.model.nvme_path.c_str());
  }
  std::printf("%zu plans considered, %zu dry runs of every rank in %.1f s\n\n", search.candidates.size(), search.dry_runs, search.seconds);
  std::printf("  %-9s %-13s %-10s %-9s %-4s %-11s %-22s %10s %9s %11s %6s\n", "status", "grid", "micro", "recompute", "ZeRO", "offload",
              "fullest rank's peak", "headroom", "step", "tokens/s", "MFU");
  std::size_t shown_refused = 0, not_measured = 0;
  for (const PlanCandidate& candidate : search.candidates) {
    if (candidate.status == PlanCandidate::Status::not_measured) {
      ++not_measured;
      continue;
    }
    if (candidate.status == PlanCandidate::Status::refused && ++shown_refused > 5) continue;
    const PlanSettings& s = candidate.settings;
    const std::string grid = "dp " + std::to_string(s.dp) + " x pp " + std::to_string(s.pp);
    const std::string micro = std::to_string(s.micro_batch) + " x " + std::to_string(s.micro_batches);
    if (candidate.status == PlanCandidate::Status::refused) {
      std::printf("  %-9s %-13s %-10s %-9s %-4d %-11s %s\n", plan_status_name(candidate.status), grid.c_str(), micro.c_str(), s.recompute.c_str(),
                  s.zero_stage, s.offload_text(), candidate.why_not.c_str());
      continue;
    }
    const bool measured = !candidate.ranks.is_null();
    const std::string peak = measured ? "rank " + std::to_string(candidate.fullest_rank) + " " + format_bytes(static_cast<std::size_t>(candidate.peak_reserved))
                                      : "states " + format_bytes(static_cast<std::size_t>(candidate.model_states_floor)) + " (formula)";
    const std::int64_t headroom = static_cast<std::int64_t>(c.device_memory) - (measured ? candidate.peak_reserved : candidate.model_states_floor);
    std::printf("  %-9s %-13s %-10s %-9s %-4d %-11s %-22s %10s %9s %11.0f %5.1f%%\n", plan_status_name(candidate.status), grid.c_str(), micro.c_str(),
                s.recompute.c_str(), s.zero_stage, s.offload_text(), peak.c_str(),
                headroom >= 0 ? format_bytes(static_cast<std::size_t>(headroom)).c_str() : ("-" + format_bytes(static_cast<std::size_t>(-headroom))).c_str(),
                format_seconds(candidate.time.total()).c_str(), candidate.tokens_per_second, 100 * candidate.mfu);
    if (candidate.status == PlanCandidate::Status::too_big) std::printf("            why not: %s\n", candidate.why_not.c_str());
  }
  if (shown_refused > 5) std::printf("  ... and %zu more refused (--summary lists them)\n", shown_refused - 5);
  if (not_measured > 0) std::printf("  %zu more plans not measured: predicted slower than those that fit, or too big as a smaller one is (--summary)\n", not_measured);
  const auto best = std::find_if(search.candidates.begin(), search.candidates.end(),
                                 [](const PlanCandidate& each) { return each.status == PlanCandidate::Status::fits; });
  const json summary = plan_summary(search, request);
  if (!options.summary.empty()) write_summary_file(options.summary, summary);
  if (best == search.candidates.end()) {
    std::printf("\nno plan fits %s devices of %s (%s of host memory a node): a larger cluster, more memory, or a smaller model or global batch\n",
                c.name.c_str(), format_bytes(c.device_memory).c_str(), format_bytes(c.host_memory).c_str());
    return 1;
  }
  const StepTimeEstimate& t = best->time;
  std::printf("\nbest: %s\n  predicted step %s = compute %s (recompute %s) + bubble %s + data parallel %s + ZeRO 3 gathers %s + pipeline %s + optimizer %s + parameter copies %s + calls %s\n",
              best->settings.text().c_str(), format_seconds(t.total()).c_str(), format_seconds(t.compute).c_str(), format_seconds(t.recompute).c_str(),
              format_seconds(t.bubble).c_str(), format_seconds(t.data_parallel).c_str(), format_seconds(t.zero3_gathers).c_str(),
              format_seconds(t.pipeline_transfers).c_str(), format_seconds(t.optimizer).c_str(), format_seconds(t.parameter_offload).c_str(),
              format_seconds(t.calls).c_str());
  std::printf("  launch: %s\n  config (ferry train --config FILE): %s\n", command_line(request, *best).c_str(), deepspeed_config(request, *best).dump().c_str());
  return 0;
}

}  // namespace ferry
