#include "engine/snapshot/pickle_document.h"

#include <algorithm>

namespace ferry {

std::string_view pickle_kind_name(PickleKind kind) {
  switch (kind) {
    case PickleKind::none: return "None";
    case PickleKind::boolean: return "bool";
    case PickleKind::integer: return "int";
    case PickleKind::floating: return "float";
    case PickleKind::string: return "str";
    case PickleKind::bytes: return "bytes";
    case PickleKind::list: return "list";
    case PickleKind::tuple: return "tuple";
    case PickleKind::dict: return "dict";
  }
  return "?";
}

PickleRef PickleDocument::add(Node node) {
  nodes_.push_back(node);
  return static_cast<PickleRef>(nodes_.size() - 1);
}

PickleRef PickleDocument::add_none() { return add(Node{PickleKind::none}); }
PickleRef PickleDocument::add_bool(bool value) { return add(Node{PickleKind::boolean, 1, 0, value ? 1 : 0}); }
PickleRef PickleDocument::add_int(std::int64_t value) { return add(Node{PickleKind::integer, 1, 0, value}); }
PickleRef PickleDocument::add_float(double value) { return add(Node{PickleKind::floating, 1, 0, 0, value}); }

PickleRef PickleDocument::add_string(std::string value) {
  texts_.push_back(std::move(value));
  return add(Node{PickleKind::string, 1, static_cast<std::uint32_t>(texts_.size() - 1)});
}

PickleRef PickleDocument::add_bytes(std::string value) {
  texts_.push_back(std::move(value));
  return add(Node{PickleKind::bytes, 1, static_cast<std::uint32_t>(texts_.size() - 1)});
}

PickleRef PickleDocument::add_container(PickleKind kind, std::vector<PickleRef> items) {
  std::uint32_t depth = 1;
  for (PickleRef item : items) depth = std::max(depth, nodes_[item].depth + 1);
  item_count_ += items.size();
  containers_.push_back(std::move(items));
  return add(Node{kind, depth, static_cast<std::uint32_t>(containers_.size() - 1)});
}

PickleRef PickleDocument::add_list() { return add_container(PickleKind::list, {}); }
PickleRef PickleDocument::add_tuple(std::vector<PickleRef> items) { return add_container(PickleKind::tuple, std::move(items)); }
PickleRef PickleDocument::add_dict() { return add_container(PickleKind::dict, {}); }

std::uint32_t PickleDocument::grow(PickleRef container, std::initializer_list<PickleRef> items) {
  Node& node = nodes_[container];
  std::vector<PickleRef>& target = containers_[node.payload];
  for (PickleRef item : items) {
    target.push_back(item);
    ++item_count_;
    node.depth = std::max(node.depth, nodes_[item].depth + 1);
  }
  return node.depth;
}

std::uint32_t PickleDocument::append(PickleRef list, PickleRef item) { return grow(list, {item}); }
std::uint32_t PickleDocument::set_item(PickleRef dict, PickleRef key, PickleRef value) { return grow(dict, {key, value}); }

std::span<const PickleRef> PickleDocument::items(PickleRef ref) const {
  const Node& node = nodes_[ref];
  if (node.kind != PickleKind::list && node.kind != PickleKind::tuple && node.kind != PickleKind::dict) return {};
  return containers_[node.payload];
}

std::optional<PickleRef> PickleDocument::find(PickleRef dict, std::string_view key) const {
  if (kind(dict) != PickleKind::dict) return std::nullopt;
  const std::span<const PickleRef> entries = items(dict);
  for (std::size_t i = entries.size(); i >= 2; i -= 2) {
    const PickleRef candidate = entries[i - 2];
    if (kind(candidate) == PickleKind::string && as_text(candidate) == key) return entries[i - 1];
  }
  return std::nullopt;
}

}  // namespace ferry
