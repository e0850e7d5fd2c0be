// PyTorch's memory snapshot (torch.cuda.memory._snapshot(), written by _dump_snapshot() as a pickle):
// the allocator's segments with their blocks at the moment of the dump, and per device a trace of
// allocator events with the Python/C++ frames that caused them. Typed here; pickle in and out.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/snapshot/pickle_document.h"

namespace ferry {

// A snapshot whose values are not what PyTorch writes: names the file and the field, e.g.
// "snap.pickle: device_traces[0][12].addr: expected an int, found a str".
class SnapshotError : public std::runtime_error {
 public:
  SnapshotError(const std::string& file, const std::string& field, const std::string& problem)
      : std::runtime_error(file + ": " + (field.empty() ? std::string() : field + ": ") + problem) {}
};

struct TorchFrame {
  std::string filename;
  std::int64_t line = 0;
  std::string name;
};

struct TorchBlock {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested_size = 0;
  std::string state;  // active_allocated, active_awaiting_free (active_pending_free), inactive
  std::vector<TorchFrame> frames;
};

struct TorchSegment {
  std::int64_t device = 0;
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t stream = 0;
  std::string segment_type;  // "large" or "small"
  bool is_expandable = false;
  std::vector<TorchBlock> blocks;
};

enum class TorchAction : std::uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  snapshot,
  oom,
};

std::string_view torch_action_name(TorchAction action);

struct TorchTraceEntry {
  TorchAction action = TorchAction::alloc;
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::optional<double> time_us;          // absent in older snapshots
  std::optional<std::uint64_t> device_free;  // oom only
  std::vector<TorchFrame> frames;         // innermost first
};

struct TorchSnapshot {
  std::vector<TorchSegment> segments;
  std::vector<std::vector<TorchTraceEntry>> device_traces;  // one trace per device
  // What ferry adds under the key "ferry" (the run's metadata and ops) when it writes a profile;
  // null in PyTorch's own snapshots. memory_viz ignores it.
  nlohmann::json ferry = nullptr;
};

TorchSnapshot decode_torch_snapshot(const PickleDocument& document, const std::string& file);
PickleDocument encode_torch_snapshot(const TorchSnapshot& snapshot);

TorchSnapshot read_torch_snapshot_file(const std::string& path);
void write_torch_snapshot_file(const std::string& path, const TorchSnapshot& snapshot);

// Whether `path` starts like a pickle (protocol 2 or later), so commands can take a snapshot where
// they take a profile directory.
bool looks_like_pickle_file(const std::string& path);

}  // namespace ferry
