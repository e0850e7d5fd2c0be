#include "engine/core/memory_profile.h"
#include "engine/core/bounded_json.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <limits>
#include <set>

#include "allocator/cleanup.h"
#include "engine/core/atomic_file.h"

namespace ferry {
namespace {

constexpr int kProfileVersion = 1;
constexpr const char* kProfileFile = "profile.json";

nlohmann::json event_to_json(const TraceEvent& event, std::uint64_t start_ns) {
  return nlohmann::json::array({event.time_ns - start_ns, std::string(trace_action_name(event.action)),
                                std::string(category_name(event.category)), event.tag, event.address, event.size, event.stream});
}

TraceAction parse_action(const std::string& name, const std::string& file) {
  const std::optional<TraceAction> action = parse_trace_action(name);
  if (!action) throw ProfileError(file + ": unknown allocator event '" + name + "'");
  return *action;
}

MemoryCategory parse_category(const std::string& name, const std::string& file) {
  const std::optional<MemoryCategory> category = parse_memory_category(name);
  if (!category) throw ProfileError(file + ": unknown memory category '" + name + "'");
  return *category;
}

}  // namespace

MemoryProfiler::~MemoryProfiler() {
  if (recording_) run_cleanup("stopping a memory profile", [&] { stop(); });
}

void MemoryProfiler::start(std::size_t event_capacity) {
  if (recording_) return;
  profile_ = MemoryProfile{};
  CachingAllocator& allocator = device_.allocator();
  for (const SegmentSnapshot& segment : allocator.snapshot().segments) {
    for (const BlockSnapshot& block : segment.blocks) {
      if (block.state != BlockState::active_allocated) continue;
      profile_.initial_allocations.push_back(LiveAllocation{block.address, block.size, block.category, block.tag, segment.stream});
    }
  }
  profile_.initial_reserved = allocator.statistics().reserved_bytes.all().current;
  profile_.memory_limit = device_.memory_limit();
  allocator.set_trace_entries(event_capacity > 0 ? event_capacity : event_capacity_);
  device_.op_recorder().clear();
  device_.op_recorder().set_enabled(true);
  profile_.start_ns = steady_now_ns();
  recording_ = true;
}

MemoryProfile MemoryProfiler::stop() {
  if (!recording_) return std::move(profile_);
  recording_ = false;
  CachingAllocator& allocator = device_.allocator();
  profile_.end_ns = steady_now_ns();
  profile_.events = allocator.trace();
  profile_.dropped_events = allocator.trace_dropped();
  allocator.set_trace_entries(0);
  std::set<TagId> used;
  for (const TraceEvent& event : profile_.events) used.insert(event.tag);
  for (TagId tag : used) {
    if (tag != 0) profile_.tags[tag] = allocator.tag_name(tag);
  }
  OpRecorder& recorder = device_.op_recorder();
  recorder.set_enabled(false);
  profile_.ops = recorder.markers();
  recorder.clear();
  return std::move(profile_);
}

bool end_at_last_out_of_memory(MemoryProfile& profile) {
  const auto last = std::find_if(profile.events.rbegin(), profile.events.rend(),
                                 [](const TraceEvent& event) { return event.action == TraceAction::oom; });
  if (last == profile.events.rend()) return false;
  profile.end_ns = last->time_ns;
  profile.events.erase(last.base(), profile.events.end());
  std::erase_if(profile.ops, [&](const OpMarker& op) { return op.start_ns > profile.end_ns; });
  for (OpMarker& op : profile.ops) {
    if (op.end_ns == 0 || op.end_ns > profile.end_ns) op.end_ns = profile.end_ns;
  }
  return true;
}

void write_memory_profile(const std::string& directory, const MemoryProfile& profile) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) throw FileError(directory, 0, "cannot create the profile directory: " + error.message());
  nlohmann::json initial = nlohmann::json::array();
  for (const LiveAllocation& each : profile.initial_allocations) {
    initial.push_back({each.address, each.size, std::string(category_name(each.category)), each.tag, each.stream});
  }
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& event : profile.events) events.push_back(event_to_json(event, profile.start_ns));
  nlohmann::json tags = nlohmann::json::object();
  for (const auto& [id, name] : profile.tags) tags[std::to_string(id)] = name;
  nlohmann::json ops = nlohmann::json::array();
  for (const OpMarker& op : profile.ops) {
    const std::uint64_t end = op.end_ns == 0 ? profile.end_ns : op.end_ns;  // still open when recording stopped
    ops.push_back({op.kind, op.name, op.stream, op.start_ns - profile.start_ns, end - profile.start_ns, op.depth});
  }
  const nlohmann::json document = {
      {"format", "ferry-memory-profile"},
      {"version", kProfileVersion},
      {"metadata", profile.metadata},
      {"memory_limit", profile.memory_limit},
      {"duration_ns", profile.end_ns - profile.start_ns},
      {"clock_start_ns", profile.clock_start_ns != 0 ? profile.clock_start_ns : profile.start_ns},
      {"initial_reserved", profile.initial_reserved},
      {"initial_allocations_columns", {"address", "size", "category", "tag", "stream"}},
      {"initial_allocations", initial},
      {"events_columns", {"time_ns", "action", "category", "tag", "address", "size", "stream"}},
      {"events", events},
      {"tags", tags},
      {"ops_columns", {"kind", "name", "stream", "start_ns", "end_ns", "depth"}},
      {"ops", ops},
      {"dropped_events", profile.dropped_events},
      {"failure", profile.failure},
  };
  write_file_atomically((std::filesystem::path(directory) / kProfileFile).string(), json_text(document));
}

MemoryProfile read_memory_profile(const std::string& directory) {
  const std::string file = (std::filesystem::path(directory) / kProfileFile).string();
  if (!std::filesystem::exists(file)) {
    throw ProfileError(file + " does not exist; record a profile with `ferry train --profile " + directory + "`");
  }
  nlohmann::json document;
  try {
    document = parse_bounded_json(read_text_file(file));
  } catch (const nlohmann::json::exception& error) {
    throw ProfileError(file + " is not valid JSON (" + error.what() + "); record the profile again");
  }
  if (!document.is_object() || !document.contains("format") || document["format"] != "ferry-memory-profile") {
    throw ProfileError(file + " is not a ferry memory profile (it has no \"format\": \"ferry-memory-profile\")");
  }
  if (!document.contains("version") || document["version"] != kProfileVersion) {
    throw ProfileError(file + " has profile version " + json_text(document.value("version", nlohmann::json(nullptr))) +
                       "; this ferry reads version " + std::to_string(kProfileVersion));
  }
  MemoryProfile profile;
  try {
    profile.metadata = document.at("metadata");
    profile.memory_limit = document.at("memory_limit").get<std::size_t>();
    profile.start_ns = 0;
    profile.end_ns = document.at("duration_ns").get<std::uint64_t>();
    profile.clock_start_ns = document.value("clock_start_ns", std::uint64_t{0});
    profile.initial_reserved = document.at("initial_reserved").get<std::int64_t>();
    for (const nlohmann::json& each : document.at("initial_allocations")) {
      profile.initial_allocations.push_back(LiveAllocation{each.at(0).get<std::uintptr_t>(), each.at(1).get<std::size_t>(),
                                                           parse_category(each.at(2).get<std::string>(), file),
                                                           each.at(3).get<std::string>(), each.at(4).get<StreamId>()});
    }
    for (const nlohmann::json& each : document.at("events")) {
      profile.events.push_back(TraceEvent{parse_action(each.at(1).get<std::string>(), file),
                                          parse_category(each.at(2).get<std::string>(), file), each.at(3).get<TagId>(),
                                          each.at(0).get<std::uint64_t>(), each.at(4).get<std::uintptr_t>(),
                                          each.at(5).get<std::size_t>(), each.at(6).get<StreamId>()});
    }
    for (const auto& [id, name] : document.at("tags").items()) {
      TagId tag = 0;
      const auto [end, error] = std::from_chars(id.data(), id.data() + id.size(), tag);
      if (error != std::errc() || end != id.data() + id.size()) {
        throw ProfileError(file + ": tag id '" + id + "' is not a number from 0 to " + std::to_string(std::numeric_limits<TagId>::max()) +
                           "; record the profile again");
      }
      profile.tags[tag] = name.get<std::string>();
    }
    for (const nlohmann::json& each : document.at("ops")) {
      profile.ops.push_back(OpMarker{each.at(0).get<std::string>(), each.at(1).get<std::string>(), each.at(2).get<StreamId>(),
                                     each.at(3).get<std::uint64_t>(), each.at(4).get<std::uint64_t>(), each.at(5).get<std::int32_t>()});
    }
    profile.dropped_events = document.at("dropped_events").get<std::size_t>();
    profile.failure = document.at("failure").get<std::string>();
  } catch (const nlohmann::json::exception& error) {
    throw ProfileError(file + " is missing or has a malformed field (" + error.what() + "); record the profile again");
  }
  return profile;
}

}  // namespace ferry
