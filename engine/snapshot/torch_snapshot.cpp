#include "engine/snapshot/torch_snapshot.h"

#include <algorithm>
#include <array>
#include <fstream>

#include "engine/core/atomic_file.h"
#include "engine/snapshot/json_pickle.h"
#include "engine/snapshot/pickle_reader.h"
#include "engine/snapshot/pickle_writer.h"

namespace ferry {
namespace {

constexpr std::array<TorchAction, 9> kAllActions = {TorchAction::alloc,         TorchAction::free_requested, TorchAction::free_completed,
                                                    TorchAction::segment_alloc, TorchAction::segment_free,   TorchAction::segment_map,
                                                    TorchAction::segment_unmap, TorchAction::snapshot,       TorchAction::oom};

// Where a value sits in the snapshot, spelled out only when something is wrong there.
struct FieldPath {
  const FieldPath* parent = nullptr;
  std::string_view key;  // empty: an index
  std::size_t index = 0;

  FieldPath at(std::string_view name) const { return FieldPath{this, name, 0}; }
  FieldPath at(std::size_t position) const { return FieldPath{this, {}, position}; }
  std::string text() const {
    if (parent == nullptr) return {};  // the snapshot itself
    std::string prefix = parent->text();
    if (!key.empty()) return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
    return prefix + "[" + std::to_string(index) + "]";
  }
};

std::string with_article(PickleKind kind) {
  return (kind == PickleKind::integer ? "an " : "a ") + std::string(pickle_kind_name(kind));
}

class Decoder {
 public:
  Decoder(const PickleDocument& document, const std::string& file)
      : document_(document), file_(file), budget_(4 * (document.size() + document.item_count()) + 1'000'000) {}

  TorchSnapshot snapshot() {
    const FieldPath root;
    const PickleRef top = document_.root();
    expect(top, PickleKind::dict, root);
    TorchSnapshot result;
    if (const auto segments = optional(top, "segments")) {
      const FieldPath where = root.at("segments");
      for_each(*segments, where, [&](PickleRef segment, const FieldPath& at) { result.segments.push_back(decode_segment(segment, at)); });
    }
    if (const auto traces = optional(top, "device_traces")) {
      const FieldPath where = root.at("device_traces");
      for_each(*traces, where, [&](PickleRef trace, const FieldPath& at) {
        std::vector<TorchTraceEntry>& entries = result.device_traces.emplace_back();
        for_each(trace, at, [&](PickleRef entry, const FieldPath& entry_at) { entries.push_back(decode_entry(entry, entry_at)); });
      });
    }
    if (!document_.find(top, "segments") && !document_.find(top, "device_traces")) {
      throw SnapshotError(file_, "", "neither 'segments' nor 'device_traces': not a PyTorch memory snapshot");
    }
    if (const auto extra = optional(top, "ferry")) result.ferry = pickle_to_json(document_, *extra, file_, "ferry");
    return result;
  }

 private:
  [[noreturn]] void fail(const FieldPath& where, const std::string& problem) const { throw SnapshotError(file_, where.text(), problem); }
  void expect(PickleRef ref, PickleKind kind, const FieldPath& where) const {
    if (document_.kind(ref) != kind) {
      fail(where, "expected " + with_article(kind) + ", found " + with_article(document_.kind(ref)));
    }
  }
  std::optional<PickleRef> optional(PickleRef dict, std::string_view key) const { return document_.find(dict, key); }
  PickleRef required(PickleRef dict, std::string_view key, const FieldPath& where) const {
    const std::optional<PickleRef> value = document_.find(dict, key);
    if (!value) fail(where, "missing the key '" + std::string(key) + "'");
    return *value;
  }
  template <typename Visit>
  void for_each(PickleRef list, const FieldPath& where, Visit visit) {
    if (document_.kind(list) != PickleKind::list && document_.kind(list) != PickleKind::tuple) expect(list, PickleKind::list, where);
    const std::span<const PickleRef> items = document_.items(list);
    if (items.size() > budget_) {
      fail(where, "the pickle shares its lists so often that reading it would visit more than " +
                      std::to_string(4 * (document_.size() + document_.item_count()) + 1'000'000) + " values (a pickle bomb?)");
    }
    budget_ -= items.size();
    for (std::size_t i = 0; i < items.size(); ++i) visit(items[i], where.at(i));
  }
  std::int64_t integer(PickleRef dict, std::string_view key, const FieldPath& where) const {
    const FieldPath at = where.at(key);
    const PickleRef value = required(dict, key, where);
    if (document_.kind(value) == PickleKind::boolean) return document_.as_bool(value) ? 1 : 0;
    expect(value, PickleKind::integer, at);
    return document_.as_int(value);
  }
  std::uint64_t count(PickleRef dict, std::string_view key, const FieldPath& where) const {
    const std::int64_t value = integer(dict, key, where);
    if (value < 0) fail(where.at(key), "is negative (" + std::to_string(value) + ")");
    return static_cast<std::uint64_t>(value);
  }
  std::uint64_t byte_size(PickleRef dict, std::string_view key, const FieldPath& where) const {
    const std::uint64_t value = count(dict, key, where);
    if (value > kMaxBytes) fail(where.at(key), std::to_string(value) + " bytes is larger than any device (the limit is 2^50)");
    return value;
  }
  std::string text(PickleRef dict, std::string_view key, const FieldPath& where) const {
    const PickleRef value = required(dict, key, where);
    expect(value, PickleKind::string, where.at(key));
    return document_.as_text(value);
  }
  std::vector<TorchFrame> frames(PickleRef dict, const FieldPath& where) {
    std::vector<TorchFrame> result;
    const auto list = optional(dict, "frames");
    if (!list) return result;
    for_each(*list, where.at("frames"), [&](PickleRef frame, const FieldPath& at) {
      expect(frame, PickleKind::dict, at);
      result.push_back(TorchFrame{text(frame, "filename", at), integer(frame, "line", at), text(frame, "name", at)});
    });
    return result;
  }
  TorchBlock decode_block(PickleRef block, const FieldPath& at) {
    expect(block, PickleKind::dict, at);
    TorchBlock result{count(block, "address", at), byte_size(block, "size", at), 0, text(block, "state", at), frames(block, at)};
    result.requested_size = optional(block, "requested_size") ? byte_size(block, "requested_size", at) : result.size;
    return result;
  }
  TorchSegment decode_segment(PickleRef segment, const FieldPath& at) {
    expect(segment, PickleKind::dict, at);
    TorchSegment result;
    result.device = optional(segment, "device") ? integer(segment, "device", at) : 0;
    result.address = count(segment, "address", at);
    result.total_size = byte_size(segment, "total_size", at);
    result.stream = optional(segment, "stream") ? count(segment, "stream", at) : 0;
    result.segment_type = optional(segment, "segment_type") ? text(segment, "segment_type", at) : "large";
    result.is_expandable = optional(segment, "is_expandable") && integer(segment, "is_expandable", at) != 0;
    if (const auto blocks = optional(segment, "blocks")) {
      for_each(*blocks, at.at("blocks"), [&](PickleRef block, const FieldPath& block_at) { result.blocks.push_back(decode_block(block, block_at)); });
    }
    return result;
  }
  TorchTraceEntry decode_entry(PickleRef entry, const FieldPath& at) {
    expect(entry, PickleKind::dict, at);
    TorchTraceEntry result;
    const std::string action = text(entry, "action", at);
    const auto known = std::find_if(kAllActions.begin(), kAllActions.end(), [&](TorchAction each) { return torch_action_name(each) == action; });
    if (known == kAllActions.end()) fail(at.at("action"), "unknown action '" + action + "'");
    result.action = *known;
    result.address = count(entry, "addr", at);
    result.size = byte_size(entry, "size", at);
    result.stream = optional(entry, "stream") ? count(entry, "stream", at) : 0;
    if (const auto time = optional(entry, "time_us")) {
      if (document_.kind(*time) == PickleKind::floating) {
        result.time_us = document_.as_float(*time);
      } else if (document_.kind(*time) != PickleKind::none) {
        result.time_us = static_cast<double>(integer(entry, "time_us", at));
      }
    }
    if (optional(entry, "device_free")) result.device_free = count(entry, "device_free", at);
    result.frames = frames(entry, at);
    return result;
  }

  static constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 50;
  const PickleDocument& document_;
  const std::string& file_;
  std::size_t budget_;  // values left to visit: shared lists are visited each time they are reached
};

PickleRef encode_frames(PickleDocument& document, const std::vector<TorchFrame>& frames) {
  const PickleRef list = document.add_list();
  for (const TorchFrame& frame : frames) {
    const PickleRef dict = document.add_dict();
    document.set_item(dict, document.add_string("filename"), document.add_string(frame.filename));
    document.set_item(dict, document.add_string("line"), document.add_int(frame.line));
    document.set_item(dict, document.add_string("name"), document.add_string(frame.name));
    document.append(list, dict);
  }
  return list;
}

// Sets dict[key] = value for each pair, in order.
template <typename... Pairs>
void set_all(PickleDocument& document, PickleRef dict, Pairs... pairs) {
  (document.set_item(dict, document.add_string(pairs.first), pairs.second), ...);
}

PickleRef unsigned_int(PickleDocument& document, std::uint64_t value) { return document.add_int(static_cast<std::int64_t>(value)); }

}  // namespace

std::string_view torch_action_name(TorchAction action) {
  switch (action) {
    case TorchAction::alloc: return "alloc";
    case TorchAction::free_requested: return "free_requested";
    case TorchAction::free_completed: return "free_completed";
    case TorchAction::segment_alloc: return "segment_alloc";
    case TorchAction::segment_free: return "segment_free";
    case TorchAction::segment_map: return "segment_map";
    case TorchAction::segment_unmap: return "segment_unmap";
    case TorchAction::snapshot: return "snapshot";
    case TorchAction::oom: return "oom";
  }
  return "?";
}

TorchSnapshot decode_torch_snapshot(const PickleDocument& document, const std::string& file) { return Decoder(document, file).snapshot(); }

PickleDocument encode_torch_snapshot(const TorchSnapshot& snapshot) {
  PickleDocument document;
  using Pair = std::pair<const char*, PickleRef>;
  const PickleRef segments = document.add_list();
  for (const TorchSegment& segment : snapshot.segments) {
    const PickleRef blocks = document.add_list();
    std::uint64_t allocated = 0, active = 0, requested = 0;
    for (const TorchBlock& block : segment.blocks) {
      const PickleRef dict = document.add_dict();
      set_all(document, dict, Pair{"address", unsigned_int(document, block.address)}, Pair{"size", unsigned_int(document, block.size)},
              Pair{"requested_size", unsigned_int(document, block.requested_size)}, Pair{"state", document.add_string(block.state)},
              Pair{"frames", encode_frames(document, block.frames)});
      document.append(blocks, dict);
      if (block.state == "active_allocated") {
        allocated += block.size;
        requested += block.requested_size;
      }
      if (block.state != "inactive") active += block.size;
    }
    const PickleRef dict = document.add_dict();
    set_all(document, dict, Pair{"device", document.add_int(segment.device)}, Pair{"address", unsigned_int(document, segment.address)},
            Pair{"total_size", unsigned_int(document, segment.total_size)}, Pair{"allocated_size", unsigned_int(document, allocated)},
            Pair{"active_size", unsigned_int(document, active)}, Pair{"requested_size", unsigned_int(document, requested)},
            Pair{"stream", unsigned_int(document, segment.stream)}, Pair{"segment_type", document.add_string(segment.segment_type)},
            Pair{"segment_pool_id", document.add_tuple({document.add_int(0), document.add_int(0)})},
            Pair{"is_expandable", document.add_bool(segment.is_expandable)}, Pair{"frames", document.add_list()},
            Pair{"blocks", blocks});
    document.append(segments, dict);
  }
  const PickleRef traces = document.add_list();
  for (const std::vector<TorchTraceEntry>& trace : snapshot.device_traces) {
    const PickleRef entries = document.add_list();
    for (const TorchTraceEntry& entry : trace) {
      const PickleRef dict = document.add_dict();
      set_all(document, dict, Pair{"action", document.add_string(std::string(torch_action_name(entry.action)))},
              Pair{"addr", unsigned_int(document, entry.address)}, Pair{"size", unsigned_int(document, entry.size)},
              Pair{"stream", unsigned_int(document, entry.stream)}, Pair{"frames", encode_frames(document, entry.frames)});
      if (entry.time_us) set_all(document, dict, Pair{"time_us", document.add_float(*entry.time_us)});
      if (entry.device_free) set_all(document, dict, Pair{"device_free", unsigned_int(document, *entry.device_free)});
      document.append(entries, dict);
    }
    document.append(traces, entries);
  }
  const PickleRef root = document.add_dict();
  set_all(document, root, Pair{"segments", segments}, Pair{"device_traces", traces});
  if (!snapshot.ferry.is_null()) set_all(document, root, Pair{"ferry", json_to_pickle(document, snapshot.ferry)});
  document.set_root(root);
  return document;
}

TorchSnapshot read_torch_snapshot_file(const std::string& path) { return decode_torch_snapshot(read_pickle_file(path), path); }

void write_torch_snapshot_file(const std::string& path, const TorchSnapshot& snapshot) {
  write_file_atomically(path, write_pickle(encode_torch_snapshot(snapshot)));
}

bool looks_like_pickle_file(const std::string& path) {
  std::ifstream input(path, std::ios::binary);
  char head[2] = {};
  if (!input.read(head, 2)) return false;
  return static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5;
}

}  // namespace ferry
