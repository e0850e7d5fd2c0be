// Reading direction: a PyTorch snapshot's trace and segments -> a ferry MemoryProfile.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "engine/snapshot/frame_categories.h"
#include "engine/snapshot/segment_ledger.h"
#include "engine/core/bounded_json.h"
#include "engine/core/memory_profile_file.h"
#include "engine/snapshot/snapshot_profile.h"

namespace ferry {
namespace {

std::string hex(std::uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::optional<TraceAction> ferry_action(TorchAction action) {
  switch (action) {
    case TorchAction::alloc: return TraceAction::alloc;
    case TorchAction::free_requested: return TraceAction::free_requested;
    case TorchAction::free_completed: return TraceAction::free_completed;
    case TorchAction::segment_alloc: return TraceAction::segment_alloc;
    case TorchAction::segment_free: return TraceAction::segment_free;
    case TorchAction::segment_map: return TraceAction::segment_map;
    case TorchAction::segment_unmap: return TraceAction::segment_unmap;
    case TorchAction::oom: return TraceAction::oom;
    case TorchAction::snapshot: return std::nullopt;
  }
  return std::nullopt;
}

class ProfileBuilder {
 public:
  ProfileBuilder(const TorchSnapshot& snapshot, const std::string& file) : snapshot_(snapshot), file_(file) {
    for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
      if (!snapshot.device_traces[d].empty()) {
        device_ = d;
        break;
      }
    }
  }

  MemoryProfile build() {
    const std::vector<TorchTraceEntry> empty;
    const std::vector<TorchTraceEntry>& trace = device_ < snapshot_.device_traces.size() ? snapshot_.device_traces[device_] : empty;
    set_run(trace);
    std::int64_t reserved = 0, lowest = 0;  // reserved bytes relative to the start, and their lowest value
    std::uint64_t previous_ns = profile_.start_ns;
    for (std::size_t i = 0; i < trace.size(); ++i) {
      const TorchTraceEntry& entry = trace[i];
      const std::optional<TraceAction> action = ferry_action(entry.action);
      if (!action) continue;
      const std::uint64_t time_ns = std::max(previous_ns, event_time_ns(entry, i));
      previous_ns = time_ns;
      InferredCategory category = *action == TraceAction::alloc || *action == TraceAction::oom ? infer_category(entry.frames) : InferredCategory{};
      if (*action == TraceAction::alloc) allocate(entry, i, category);
      if (*action == TraceAction::free_requested) category = release(entry, i);
      if (*action == TraceAction::segment_alloc || *action == TraceAction::segment_map) {
        map_segment(entry, i);
        reserved += static_cast<std::int64_t>(entry.size);
      }
      if (*action == TraceAction::segment_free || *action == TraceAction::segment_unmap) {
        unmap_segment(entry, i);
        reserved -= static_cast<std::int64_t>(entry.size);
      }
      lowest = std::min(lowest, reserved);
      profile_.events.push_back(TraceEvent{*action, category.category, intern(category.tag), time_ns, static_cast<std::uintptr_t>(entry.address),
                                           static_cast<std::size_t>(entry.size), entry.stream});
    }
    profile_.end_ns = std::max(profile_.end_ns, previous_ns);
    add_allocations_live_throughout();
    std::int64_t final_reserved = 0;
    for (const TorchSegment& segment : snapshot_.segments) {
      if (segment.device != static_cast<std::int64_t>(device_)) continue;
      final_reserved += static_cast<std::int64_t>(segment.total_size);
      if (const auto gone = segments_.find(segment.address, segment.total_size, SegmentLedger::State::unmapped)) {
        throw SnapshotError(file_, field(gone->event, "addr"), "unmaps " + hex(gone->begin) + " of the segment at " + hex(segment.address) +
                                                                   ", which the snapshot's segments still hold at the end (never mapped again)");
      }
    }
    // The segments are the state at the end; the trace's segment events lead there from the start.
    profile_.initial_reserved = std::max(final_reserved - reserved, -lowest);
    return std::move(profile_);
  }

 private:
  struct Seen {
    bool live;
    std::size_t event;  // where it was last allocated or freed
    std::size_t size;
  };

  void set_run(const std::vector<TorchTraceEntry>& trace) {
    const nlohmann::json& ferry = snapshot_.ferry;
    if (ferry.is_object() && ferry.value("format", "") == "ferry-profile-in-snapshot") {
      try {
        profile_.metadata = ferry.at("metadata");
        profile_.memory_limit = ferry.at("memory_limit").get<std::size_t>();
        profile_.end_ns = ferry.at("duration_ns").get<std::uint64_t>();
        profile_.failure = ferry.at("failure").get<std::string>();
        for (const nlohmann::json& op : ferry.at("ops")) {
          profile_.ops.push_back(OpMarker{op.at(0).get<std::string>(), op.at(1).get<std::string>(), op.at(2).get<StreamId>(),
                                          op.at(3).get<std::uint64_t>(), op.at(4).get<std::uint64_t>(), op.at(5).get<std::int32_t>()});
        }
      } catch (const nlohmann::json::exception& error) {
        throw SnapshotError(file_, "ferry", std::string("malformed: ") + describe_json_error(error));
      }
      return;
    }
    profile_.metadata = {{"model", std::filesystem::path(file_).filename().string()},
                         {"device", "cuda:" + std::to_string(device_)},
                         {"precision", "PyTorch memory snapshot"},
                         {"category_rule", std::string(category_rule())}};
    if (!trace.empty()) {
      profile_.start_ns = event_time_ns(trace.front(), 0);
      for (std::size_t i = 0; i < trace.size(); ++i) profile_.start_ns = std::min(profile_.start_ns, event_time_ns(trace[i], i));
    }
    profile_.end_ns = profile_.start_ns;
  }

  std::uint64_t event_time_ns(const TorchTraceEntry& entry, std::size_t index) const {
    if (!entry.time_us) return index * 1000;  // 1 us per event
    const double nanoseconds = *entry.time_us * 1000.0;
    if (!(nanoseconds >= 0) || nanoseconds > 9e18) throw SnapshotError(file_, field(index, "time_us"), "out of range");
    return static_cast<std::uint64_t>(std::llround(nanoseconds));
  }

  std::string field(std::size_t index, std::string_view key) const {
    return "device_traces[" + std::to_string(device_) + "][" + std::to_string(index) + "]." + std::string(key);
  }

  TagId intern(const std::string& tag) {
    if (tag.empty()) return 0;
    const auto [it, added] = tag_ids_.try_emplace(tag, static_cast<TagId>(tag_ids_.size() + 1));
    if (added) profile_.tags[it->second] = tag;
    return it->second;
  }

  void allocate(const TorchTraceEntry& entry, std::size_t index, const InferredCategory& category) {
    const auto [it, added] = seen_.try_emplace(entry.address, Seen{true, index, entry.size});
    if (!added && it->second.live) {
      throw SnapshotError(file_, field(index, "addr"), "alloc at " + hex(entry.address) + ", which is still live (allocated at event " +
                                                           std::to_string(it->second.event) + ")");
    }
    it->second = Seen{true, index, entry.size};
    categories_[entry.address] = category;
  }

  // Segments by the bytes their events cover: a map over memory the trace mapped and did not unmap, or
  // an unmap of memory it unmapped and did not map again, cannot have happened. Memory the trace never
  // touched is unknown: PyTorch keeps the last events only, so unmapping it is of a segment from before
  // the trace (as PyTorch's memory_viz reads it), and mapping it is of memory that was free then.
  void map_segment(const TorchTraceEntry& entry, std::size_t index) {
    if (const auto held = segments_.map(entry.address, entry.size, index)) {
      throw SnapshotError(file_, field(index, "addr"), "maps " + hex(held->begin) + ", which the trace mapped at event " +
                                                           std::to_string(held->event) + " and has not unmapped (events repeated?)");
    }
  }
  void unmap_segment(const TorchTraceEntry& entry, std::size_t index) {
    if (const auto gone = segments_.unmap(entry.address, entry.size, index)) {
      throw SnapshotError(file_, field(index, "addr"), "unmaps " + hex(gone->begin) + ", which the trace unmapped at event " +
                                                           std::to_string(gone->event) + " and never mapped again (events repeated?)");
    }
  }

  // A free of an address never seen before was allocated before the trace began: it was live from the start.
  InferredCategory release(const TorchTraceEntry& entry, std::size_t index) {
    const auto it = seen_.find(entry.address);
    if (it == seen_.end()) {
      const InferredCategory category = ferry_category(entry.frames);
      profile_.initial_allocations.push_back(LiveAllocation{entry.address, entry.size, category.category, category.tag, entry.stream});
      seen_.emplace(entry.address, Seen{false, index, entry.size});
      return category;
    }
    if (!it->second.live) {
      throw SnapshotError(file_, field(index, "addr"), "free_requested of " + hex(entry.address) + ", an unknown address (not live: freed at event " +
                                                           std::to_string(it->second.event) + ")");
    }
    if (it->second.size != entry.size) {
      throw SnapshotError(file_, field(index, "size"), "frees " + std::to_string(entry.size) + " bytes at " + hex(entry.address) + ", allocated with " +
                                                           std::to_string(it->second.size) + " at event " + std::to_string(it->second.event));
    }
    it->second = Seen{false, index, entry.size};
    return categories_[entry.address];
  }

  // Blocks the segments hold as allocated that the trace never mentions were live all along.
  void add_allocations_live_throughout() {
    for (const TorchSegment& segment : snapshot_.segments) {
      if (segment.device != static_cast<std::int64_t>(device_)) continue;
      for (const TorchBlock& block : segment.blocks) {
        if (block.state != "active_allocated") continue;
        const auto it = seen_.find(block.address);
        if (it == seen_.end()) {
          const InferredCategory category = infer_category(block.frames);
          profile_.initial_allocations.push_back(LiveAllocation{block.address, block.size, category.category, category.tag, segment.stream});
        } else if (!it->second.live) {
          throw SnapshotError(file_, "segments", "block " + hex(block.address) + " is allocated, but the trace freed it at event " +
                                                     std::to_string(it->second.event) + " and never allocated it again");
        }
      }
    }
  }

  const TorchSnapshot& snapshot_;
  const std::string& file_;
  std::size_t device_ = 0;
  MemoryProfile profile_;
  std::unordered_map<std::uint64_t, Seen> seen_;
  SegmentLedger segments_;  // what the trace's segment events mapped and unmapped
  std::unordered_map<std::uint64_t, InferredCategory> categories_;
  std::unordered_map<std::string, TagId> tag_ids_;
};

}  // namespace

MemoryProfile snapshot_to_profile(const TorchSnapshot& snapshot, const std::string& file) { return ProfileBuilder(snapshot, file).build(); }

MemoryProfile read_profile_or_snapshot(const std::string& path) {
  if (std::filesystem::is_regular_file(path)) {
    if (!looks_like_pickle_file(path)) {
      throw SnapshotError(path, "", "is a file but not a PyTorch snapshot (a pickle of protocol 2 to 5 starts with 0x80 and the protocol); "
                                    "give a profile directory (ferry train --profile DIR) or a snapshot (torch.cuda.memory._dump_snapshot)");
    }
    return snapshot_to_profile(read_torch_snapshot_file(path), path);
  }
  return read_memory_profile(path);
}

}  // namespace ferry
