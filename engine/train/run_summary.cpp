#include "engine/train/run_summary.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "allocator/byte_size.h"
#include "engine/core/cpu_device.h"
#include "engine/report/model_state_report.h"
#include "engine/report/summary_file.h"

namespace ferry {
namespace {

std::string bytes_text(const nlohmann::json& value) { return format_bytes(value.get<std::size_t>()); }

}  // namespace

nlohmann::json memory_summary(const Device& device, const nlohmann::json& optimizer) {
  const AllocatorStatistics stats = device.allocator().statistics();
  return {{"peak_allocated", stats.allocated_bytes.all().peak}, {"peak_reserved", stats.reserved_bytes.all().peak},
          {"at_peak", bytes_by_category(stats.category_allocated_at_peak)}, {"max_by_category", bytes_by_category(category_peaks(stats))},
          {"host_pinned_peak", optimizer.value("host_pinned_peak", std::int64_t{0})}, {"nvme_bytes", optimizer.value("nvme_bytes", std::int64_t{0})},
          {"num_ooms", stats.num_ooms}, {"num_alloc_retries", stats.num_alloc_retries},
          {"num_release_failures", stats.num_release_failures}, {"device_memory_limit", device.memory_limit()}};
}

nlohmann::json rank_entry(const ProcessGrid& grid, const Device& device, const nlohmann::json& optimizer, std::int64_t steps_run) {
  nlohmann::json entry = grid.describe();
  const nlohmann::json memory = memory_summary(device, optimizer);
  for (const char* key : {"peak_allocated", "peak_reserved", "max_by_category", "at_peak", "host_pinned_peak", "nvme_bytes", "num_ooms",
                          "num_alloc_retries", "num_release_failures"}) {
    entry[key] = memory[key];
  }
  // The process's resident peak (ru_maxrss): the host memory offloaded state, staging and the run itself took.
  entry["host_peak_resident"] = peak_resident_bytes();
  std::uint64_t sent = 0;
  double stream_seconds = 0.0;
  bool has_stream = false;
  for (const GridAxis axis : {GridAxis::tp, GridAxis::dp, GridAxis::pp}) {
    const Communicator& group = grid.group(axis);
    sent += group.bytes_sent();
    stream_seconds += group.stream_seconds();
    has_stream = has_stream || group.backend() == "nccl";
  }
  entry["bytes_sent"] = sent;
  entry["communication_backend"] = grid.group(GridAxis::dp).backend();  // every group's: "nccl", "host-staged", "mpi", "single"
  // NCCL's communication streams' busy time (null where the groups have none: MPI, one rank).
  entry["communication_stream_seconds"] = has_stream ? nlohmann::json(stream_seconds) : nlohmann::json(nullptr);
  entry["bytes_sent_per_step"] = steps_run > 0 ? sent / static_cast<std::uint64_t>(steps_run) : 0;
  entry["optimizer"] = optimizer;
  return entry;
}

void merge_rank_entries(nlohmann::json& summary, nlohmann::json ranks) {
  const auto fullest = std::max_element(ranks.begin(), ranks.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["peak_reserved"].get<std::int64_t>() < b["peak_reserved"].get<std::int64_t>();
  });
  nlohmann::json& memory = summary["memory"];
  for (const char* key : {"peak_allocated", "peak_reserved", "at_peak", "max_by_category"}) memory[key] = (*fullest)[key];
  memory["rank"] = (*fullest)["rank"];
  std::int64_t resident = 0;  // the fullest process's (ranks simulated in one process share one)
  for (const nlohmann::json& entry : ranks) resident = std::max(resident, entry["host_peak_resident"].get<std::int64_t>());
  memory["host_peak_resident"] = resident;
  for (const char* key : {"host_pinned_peak", "nvme_bytes", "num_ooms", "num_alloc_retries", "num_release_failures"}) {
    std::int64_t sum = 0;
    for (const nlohmann::json& entry : ranks) sum += entry[key].get<std::int64_t>();
    memory[key] = sum;
  }
  summary["ranks"] = std::move(ranks);
}

void print_rank_lines(const nlohmann::json& ranks) {
  for (const nlohmann::json& entry : ranks) {
    std::string where = "dp " + std::to_string(entry["dp"].get<int>());
    if (entry.contains("stage")) where += ", stage " + std::to_string(entry["stage"].get<int>());
    std::printf("  rank %d (%s): peak allocated %s, peak reserved %s, optimizer states %s, gradients %s, sent %s per step", entry["rank"].get<int>(),
                where.c_str(), bytes_text(entry["peak_allocated"]).c_str(), bytes_text(entry["peak_reserved"]).c_str(),
                format_bytes(entry["max_by_category"].value("optimizer_states", std::size_t{0})).c_str(),
                format_bytes(entry["max_by_category"].value("gradients", std::size_t{0})).c_str(), bytes_text(entry["bytes_sent_per_step"]).c_str());
    if (entry.contains("communication_stream_seconds") && entry["communication_stream_seconds"].is_number()) {
      std::printf(" (communication stream busy %.3f s)", entry["communication_stream_seconds"].get<double>());
    }
    if (entry.contains("activation_stash")) {
      const nlohmann::json& stash = entry["activation_stash"];
      std::printf(", activation stash peak %s (one micro-batch %s)", bytes_text(stash["peak"]).c_str(), bytes_text(stash["one_micro_batch"]).c_str());
    }
    std::printf("\n");
  }
}

// The end of a run, on rank 0: the loss and rate, the memory at the fullest rank's peak, the model
// states beside ZeRO's formulas, fp16's scaler and the offload's figures, then a line per rank.
void print_training_result(const nlohmann::json& summary) {
  if (summary.contains("profile")) {
    const std::string profile = summary["profile"].get<std::string>();
    std::printf("  memory profile in %s: run `ferry report %s`\n", profile.c_str(), profile.c_str());
  }
  const nlohmann::json& memory = summary["memory"];
  const std::string peaks = "peak allocated " + format_bytes(memory["peak_allocated"].get<std::size_t>()) + " | peak reserved " +
                            format_bytes(memory["peak_reserved"].get<std::size_t>()) +
                            (summary["ranks"].size() > 1 ? " (rank " + memory["rank"].dump() + ", the fullest)" : std::string());
  if (!summary["run"]["dry_run"].get<bool>()) {
    std::printf("  final loss %.4f | %.0f tok/s (median) | %s\n", summary["final_loss"].is_null() ? 0.0 : summary["final_loss"].get<double>(),
                summary["tokens_per_second"].get<double>(), peaks.c_str());
  } else {
    std::printf("  dry run on meta (no values computed) | %s\n", peaks.c_str());
  }
  std::printf("  at peak:");
  for (const auto& [category, bytes] : memory["at_peak"].items()) {
    if (bytes.get<std::int64_t>() > 0) std::printf(" %s %s", category.c_str(), format_bytes(bytes.get<std::size_t>()).c_str());
  }
  std::printf("\n%s\n", describe_model_state_report(summary["model_states"]).c_str());
  if (summary.contains("loss_scaling")) {
    const nlohmann::json& scaling = summary["loss_scaling"];
    std::printf("  fp16 loss scale %g (%s): %lld overflowing steps skipped\n", scaling["scale"].get<double>(),
                scaling["dynamic"].get<bool>() ? "dynamic" : "static", static_cast<long long>(scaling["skipped_steps"].get<std::int64_t>()));
  }
  const nlohmann::json& optimizer = summary["optimizer"];
  if (summary["run"]["offload_optimizer"] != "none" && !summary["run"]["dry_run"].get<bool>() && optimizer.contains("cpu_adam")) {
    const nlohmann::json& phases = optimizer["last_step_seconds"];
    const std::size_t ranks = summary.contains("ranks") ? summary["ranks"].size() : 1;
    const std::string all = ranks > 1 ? " (sums over " + std::to_string(ranks) + " ranks)" : "";
    std::printf("  offload %s: host pinned peak %s, NVMe %s%s, resident peak %s%s; last optimizer step %.3f s (CpuAdam %.3f s, %s x %d threads)\n",
                summary["run"]["offload_optimizer"].get<std::string>().c_str(), format_bytes(memory["host_pinned_peak"].get<std::size_t>()).c_str(),
                format_bytes(memory["nvme_bytes"].get<std::size_t>()).c_str(), all.c_str(),
                format_bytes(memory["host_peak_resident"].get<std::size_t>()).c_str(), ranks > 1 ? " (the largest rank's)" : "",
                phases["step"].get<double>(), phases["adam"].get<double>(),
                optimizer["cpu_adam"]["simd"].get<std::string>().c_str(), optimizer["cpu_adam"]["threads"].get<int>());
  }
  if (optimizer.contains("parameter_offload") && !summary["run"]["dry_run"].get<bool>()) {
    const nlohmann::json& home = optimizer["parameter_offload"];
    const auto bytes = [&](const char* key) { return format_bytes(home[key].get<std::size_t>()); };
    if (home["device"] == "nvme") {
      std::printf("  parameters offloaded to nvme: the partition's %s in a file on NVMe, read and written through %s of host buffers "
                  "(all the host memory it holds; pinned peak %s)\n", bytes("partition_bytes").c_str(), bytes("host_bytes").c_str(), bytes("host_pinned_peak").c_str());
    } else {
      std::printf("  parameters offloaded to cpu: the partition's %s in host memory (pinned peak %s)\n", bytes("partition_bytes").c_str(),
                  bytes("host_pinned_peak").c_str());
    }
  }
  if (summary["ranks"].size() > 1) print_rank_lines(summary["ranks"]);
}

}  // namespace ferry
