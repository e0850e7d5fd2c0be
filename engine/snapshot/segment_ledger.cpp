#include "engine/snapshot/segment_ledger.h"

#include <algorithm>
#include <limits>

namespace ferry {
namespace {

std::uint64_t end_of(std::uint64_t begin, std::uint64_t size) {
  return size > std::numeric_limits<std::uint64_t>::max() - begin ? std::numeric_limits<std::uint64_t>::max() : begin + size;
}

}  // namespace

std::optional<SegmentLedger::Conflict> SegmentLedger::find(std::uint64_t begin, std::uint64_t size, State state) const {
  const std::uint64_t end = end_of(begin, size);
  auto it = pieces_.upper_bound(begin);
  if (it != pieces_.begin()) --it;  // the piece starting at or before begin may reach into the range
  for (; it != pieces_.end() && it->first < end; ++it) {
    if (it->second.end <= begin || it->second.state != state) continue;
    return Conflict{state, std::max(it->first, begin), it->second.event};
  }
  return std::nullopt;
}

std::optional<SegmentLedger::Conflict> SegmentLedger::map(std::uint64_t begin, std::uint64_t size, std::size_t event) {
  return set(begin, size, State::mapped, event);
}

std::optional<SegmentLedger::Conflict> SegmentLedger::unmap(std::uint64_t begin, std::uint64_t size, std::size_t event) {
  return set(begin, size, State::unmapped, event);
}

std::optional<SegmentLedger::Conflict> SegmentLedger::set(std::uint64_t begin, std::uint64_t size, State state, std::size_t event) {
  if (size == 0) return std::nullopt;
  if (const auto conflict = find(begin, size, state)) return conflict;
  const std::uint64_t end = end_of(begin, size);
  split_at(begin);
  split_at(end);
  pieces_.erase(pieces_.lower_bound(begin), pieces_.lower_bound(end));
  pieces_.emplace(begin, Piece{end, state, event});
  return std::nullopt;
}

void SegmentLedger::split_at(std::uint64_t address) {
  auto it = pieces_.upper_bound(address);
  if (it == pieces_.begin()) return;
  --it;
  if (it->first >= address || it->second.end <= address) return;
  Piece tail = it->second;
  it->second.end = address;
  pieces_.emplace(address, tail);
}

}  // namespace ferry
