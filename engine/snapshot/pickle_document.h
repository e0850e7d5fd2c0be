// The values of a pickle as ferry reads them: an arena of nodes (None, bools, ints, floats, strings,
// bytes, lists, tuples, dicts) addressed by index, so shared and even cyclic references (pickle's memo)
// cost nothing and nothing is ever freed or walked recursively. Readers of snapshots navigate it by key.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

enum class PickleKind : std::uint8_t { none, boolean, integer, floating, string, bytes, list, tuple, dict };

std::string_view pickle_kind_name(PickleKind kind);

using PickleRef = std::uint32_t;

class PickleDocument {
 public:
  // Building (the reader and the writer's callers).
  PickleRef add_none();
  PickleRef add_bool(bool value);
  PickleRef add_int(std::int64_t value);
  PickleRef add_float(double value);
  PickleRef add_string(std::string value);
  PickleRef add_bytes(std::string value);
  PickleRef add_list();
  PickleRef add_tuple(std::vector<PickleRef> items);
  PickleRef add_dict();
  // Appends to a list; returns the list's new nesting depth.
  std::uint32_t append(PickleRef list, PickleRef item);
  // Adds a key and value to a dict (a later equal key wins when looked up); returns its nesting depth.
  std::uint32_t set_item(PickleRef dict, PickleRef key, PickleRef value);
  void set_root(PickleRef root) { root_ = root; }

  // Reading.
  PickleRef root() const { return root_; }
  std::size_t size() const { return nodes_.size(); }
  // Items held by all containers together (a dict entry counts two): with size(), how much a full walk
  // of the document may visit when nothing is shared.
  std::size_t item_count() const { return item_count_; }
  PickleKind kind(PickleRef ref) const { return nodes_[ref].kind; }
  // Containers: 0; otherwise 1 + the deepest item's depth when it was added.
  std::uint32_t depth(PickleRef ref) const { return nodes_[ref].depth; }
  bool as_bool(PickleRef ref) const { return nodes_[ref].integer != 0; }
  std::int64_t as_int(PickleRef ref) const { return nodes_[ref].integer; }
  double as_float(PickleRef ref) const { return nodes_[ref].floating; }
  const std::string& as_text(PickleRef ref) const { return texts_[nodes_[ref].payload]; }  // string or bytes
  // A list's or tuple's items; a dict's keys and values interleaved (k0, v0, k1, v1, ...).
  std::span<const PickleRef> items(PickleRef ref) const;
  // The value of the last entry whose key is the string `key`, in a dict.
  std::optional<PickleRef> find(PickleRef dict, std::string_view key) const;

 private:
  struct Node {
    PickleKind kind;
    std::uint32_t depth = 1;
    std::uint32_t payload = 0;  // index into texts_ or containers_
    std::int64_t integer = 0;
    double floating = 0.0;
  };
  PickleRef add(Node node);
  PickleRef add_container(PickleKind kind, std::vector<PickleRef> items);
  std::uint32_t grow(PickleRef container, std::initializer_list<PickleRef> items);

  std::vector<Node> nodes_;
  std::vector<std::string> texts_;
  std::vector<std::vector<PickleRef>> containers_;
  PickleRef root_ = 0;
  std::size_t item_count_ = 0;
};

}  // namespace ferry
