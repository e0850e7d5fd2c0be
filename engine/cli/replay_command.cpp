#include "engine/cli/replay_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "allocator/byte_size.h"
#include "allocator/trace_replay.h"
#include "engine/core/atomic_file.h"
#include "engine/core/device.h"
#include "engine/report/summary_file.h"
#include "engine/snapshot/snapshot_profile.h"
#include "engine/snapshot/snapshot_replay.h"

namespace ferry {

void add_replay_command(CLI::App& app, ReplayCommandOptions& options) {
  CLI::App* replay = app.add_subcommand("replay", "Replay an RMM allocation trace (CSV) or a PyTorch memory snapshot through the caching allocator");
  replay->add_option("trace", options.trace_path, "RMM logging CSV (Thread,Time,Action,Pointer,Size,Stream) or a PyTorch snapshot (.pickle)")
      ->required()
      ->check(CLI::ExistingFile);
  replay->add_option("--capacity", options.capacity, "Device memory to replay against (e.g. 512MiB); default unlimited");
  replay->add_option("--alloc-conf", options.alloc_conf,
                     "Allocator settings as FERRY_ALLOC_CONF (e.g. expandable_segments:True); default: the environment");
  replay->add_flag("--find-min-capacity", options.find_min_capacity,
                   "Bisect the smallest capacity (to 1 MiB) at which the whole trace completes");
  replay->add_option("--device", options.device,
                     "meta (address space only; PyTorch snapshots' segments at their recorded addresses) or cuda (the GPU's "
                     "memory: cudaMalloc segments, or virtual memory with expandable segments)")
      ->check(CLI::IsMember({"meta", "cuda"}));
  replay->add_option("--summary", options.summary_path, "Write the results as JSON to this file");
}

int run_replay_command(const ReplayCommandOptions& options) {
  const AllocatorConfig config =
      options.alloc_conf ? AllocatorConfig::parse(*options.alloc_conf) : AllocatorConfig::from_environment();
  const std::size_t capacity = options.capacity.empty() ? kUnlimitedReplayCapacity : parse_byte_size(options.capacity);
  std::vector<RmmTraceRecord> records;
  std::vector<RecordedSegment> segments;  // a snapshot's: where PyTorch's segments were
  if (looks_like_pickle_file(options.trace_path)) {
    const MemoryProfile profile = read_profile_or_snapshot(options.trace_path);
    records = profile_allocation_records(profile);
    segments = profile_segment_records(profile);
  } else {
    regular_file_size(options.trace_path);  // a device or pipe never ends: refused, naming it
    records = read_rmm_trace_file(options.trace_path);
  }
  const bool on_cuda = options.device == "cuda";
  if (on_cuda && options.find_min_capacity) {
    throw std::invalid_argument("--find-min-capacity bisects on the meta device (hundreds of replays); drop --device cuda");
  }
  ReplayResult result;
  if (on_cuda) {  // the GPU's own segments: wherever the driver puts them, so recorded addresses are not followed
    DeviceOptions device_options{DeviceKind::cuda, options.capacity.empty() ? 0 : capacity, config};
    const std::unique_ptr<Device> device = create_device(device_options);
    result = replay_trace_through(device->allocator(), records);
  } else {
    result = replay_trace(records, capacity, config, segments);
  }

  std::printf("ferry replay %s\n", options.trace_path.c_str());
  std::printf("  records                %zu (%zu allocations, %zu frees, %zu allocate failures skipped)\n",
              records.size(), result.allocations, result.frees, result.trace_failures);
  std::printf("  device                 %s\n", on_cuda ? "cuda (the GPU's memory)" : "meta (address space only)");
  std::printf("  capacity               %s\n",
              on_cuda ? format_bytes(result.capacity).c_str() : options.capacity.empty() ? "unlimited" : format_bytes(capacity).c_str());
  std::printf("  allocator              %s\n", config.to_string().c_str());
  std::printf("  peak requested         %s\n", format_bytes(result.peak_requested).c_str());
  std::printf("  peak allocated         %s\n", format_bytes(result.peak_allocated).c_str());
  std::printf("  peak reserved          %s (%.3fx peak requested)\n", format_bytes(result.peak_reserved).c_str(),
              result.peak_requested ? static_cast<double>(result.peak_reserved) / static_cast<double>(result.peak_requested) : 0.0);
  std::printf("  fragmentation at peak  %.1f%% of reserved not requested; largest free block %.1f%% of free bytes\n",
              100.0 * result.fragmentation_at_peak, 100.0 * result.largest_free_fraction_at_peak);
  std::printf("  segment allocations    %lld", static_cast<long long>(result.num_device_alloc));
  if (!segments.empty() && !on_cuda) {
    std::printf(" (%zu of the trace's %zu at its addresses, so equal free blocks are chosen as it chose them)",
                result.segments_at_recorded_addresses, segments.size());
  }
  std::printf("\n");
  std::printf("  alloc retries          %lld\n", static_cast<long long>(result.num_alloc_retries));
  std::printf("  out of memory          %lld\n", static_cast<long long>(result.num_ooms));
  if (result.unknown_frees > 0) std::printf("  unknown frees          %zu\n", result.unknown_frees);
  for (const std::string& problem : result.problems) std::printf("  ! %s\n", problem.c_str());

  nlohmann::json summary = {
      {"trace", options.trace_path},
      {"records", records.size()},
      {"capacity", on_cuda ? nlohmann::json(result.capacity) : options.capacity.empty() ? nlohmann::json(nullptr) : nlohmann::json(capacity)},
      {"alloc_conf", config.to_string()},
      {"device", options.device},
      {"completed", result.completed()},
      {"peak_requested", result.peak_requested},
      {"peak_allocated", result.peak_allocated},
      {"peak_reserved", result.peak_reserved},
      {"fragmentation_at_peak", result.fragmentation_at_peak},
      {"largest_free_fraction_at_peak", result.largest_free_fraction_at_peak},
      {"num_alloc_retries", result.num_alloc_retries},
      {"num_ooms", result.num_ooms},
      {"num_device_alloc", result.num_device_alloc},
      {"unknown_frees", result.unknown_frees},
      {"segments_at_recorded_addresses", result.segments_at_recorded_addresses},
      {"problems", result.problems},
  };
  if (options.find_min_capacity) {
    const std::size_t minimum = find_min_capacity(records, config, segments);
    std::printf("  min capacity           %s (%.3fx peak requested)\n", format_bytes(minimum).c_str(),
                result.peak_requested ? static_cast<double>(minimum) / static_cast<double>(result.peak_requested) : 0.0);
    summary["min_capacity"] = minimum;
  }
  if (!options.summary_path.empty()) write_summary_file(options.summary_path, summary);
  return 0;
}

}  // namespace ferry
