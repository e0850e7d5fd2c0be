#include "engine/core/memory_profile_file.h"

#include <charconv>
#include <filesystem>
#include <limits>

#include "engine/core/atomic_file.h"
#include "engine/core/bounded_json.h"

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
  return parse_memory_profile(read_text_file(file), file);
}

MemoryProfile parse_memory_profile(std::string_view text, const std::string& file) {
  nlohmann::json document;
  try {
    document = parse_bounded_json(text);
  } catch (const nlohmann::json::exception& error) {
    throw ProfileError(file + " is not valid JSON (" + describe_json_error(error) + "); record the profile again");
  }
  if (!document.is_object() || !document.contains("format") || document["format"] != "ferry-memory-profile") {
    throw ProfileError(file + " is not a ferry memory profile (it has no \"format\": \"ferry-memory-profile\")");
  }
  if (!document.contains("version") || document["version"] != kProfileVersion) {
    throw ProfileError(file + " has profile version " + json_text(document.value("version", nlohmann::json(nullptr))) +
                       "; this ferry reads version " + std::to_string(kProfileVersion));
  }
  MemoryProfile profile;
  // Every integer whole and in its type's range (a float such as 1e21 would convert undefined).
  const auto named = [&](const char* what) { return file + ": " + what; };
  try {
    profile.metadata = document.at("metadata");
    profile.memory_limit = json_integer<std::size_t>(document.at("memory_limit"), named("memory_limit"));
    profile.start_ns = 0;
    profile.end_ns = json_integer<std::uint64_t>(document.at("duration_ns"), named("duration_ns"));
    if (document.contains("clock_start_ns")) {
      profile.clock_start_ns = json_integer<std::uint64_t>(document.at("clock_start_ns"), named("clock_start_ns"));
    }
    profile.initial_reserved = json_integer<std::int64_t>(document.at("initial_reserved"), named("initial_reserved"));
    for (const nlohmann::json& each : document.at("initial_allocations")) {
      const std::string what = named("an initial allocation's");
      profile.initial_allocations.push_back(LiveAllocation{
          json_integer<std::uintptr_t>(each.at(0), what + " address"), json_integer<std::size_t>(each.at(1), what + " size"),
          parse_category(each.at(2).get<std::string>(), file), each.at(3).get<std::string>(),
          json_integer<StreamId>(each.at(4), what + " stream")});
    }
    // The columns are read in the order this ferry writes them: a file that lists them otherwise would
    // be read with its addresses as sizes.
    const std::pair<const char*, nlohmann::json> layouts[] = {
        {"initial_allocations_columns", {"address", "size", "category", "tag", "stream"}},
        {"events_columns", {"time_ns", "action", "category", "tag", "address", "size", "stream"}},
        {"ops_columns", nlohmann::json::array()}};
    for (const auto& [key, expected] : layouts) {
      if (!document.contains(key) || expected.empty()) continue;
      if (document[key] != expected) {
        throw ProfileError(file + ": \"" + key + "\" is " + json_text(document[key]) + ", but this ferry reads " + json_text(expected) +
                           "; record the profile again");
      }
    }
    for (const nlohmann::json& each : document.at("events")) {
      const std::string what = named("an event's");
      profile.events.push_back(TraceEvent{
          parse_action(each.at(1).get<std::string>(), file), parse_category(each.at(2).get<std::string>(), file),
          json_integer<TagId>(each.at(3), what + " tag"), json_integer<std::uint64_t>(each.at(0), what + " time_ns"),
          json_integer<std::uintptr_t>(each.at(4), what + " address"), json_integer<std::size_t>(each.at(5), what + " size"),
          json_integer<StreamId>(each.at(6), what + " stream")});
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
      const std::string what = named("an op's");
      profile.ops.push_back(OpMarker{each.at(0).get<std::string>(), each.at(1).get<std::string>(),
                                     json_integer<StreamId>(each.at(2), what + " stream"),
                                     json_integer<std::uint64_t>(each.at(3), what + " start_ns"),
                                     json_integer<std::uint64_t>(each.at(4), what + " end_ns"),
                                     json_integer<std::int32_t>(each.at(5), what + " depth")});
    }
    profile.dropped_events = json_integer<std::size_t>(document.at("dropped_events"), named("dropped_events"));
    profile.failure = document.at("failure").get<std::string>();
  } catch (const nlohmann::json::exception& error) {
    throw ProfileError(file + " is missing or has a malformed field (" + describe_json_error(error) + "); record the profile again");
  } catch (const std::invalid_argument& error) {
    throw ProfileError(std::string(error.what()) + "; record the profile again");
  }
  return profile;
}

}  // namespace ferry
