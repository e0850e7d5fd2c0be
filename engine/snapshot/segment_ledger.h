// SegmentLedger: which device addresses a snapshot's trace has mapped or unmapped, by byte range, so
// that reading a trace can refuse events that cannot have happened (a map over mapped memory, an unmap
// of memory already unmapped) while memory the trace never touched stays unknown: PyTorch's trace is a
// ring of its last events, so an unmap of untouched memory is of a segment mapped before the trace began.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace ferry {

class SegmentLedger {
 public:
  enum class State { mapped, unmapped };
  // A known range that a new event contradicts: its state and the event that set it.
  struct Conflict {
    State state;
    std::uint64_t begin;
    std::size_t event;
  };

  // Each returns the first known range of [begin, begin + size) in the state the event cannot meet
  // (mapped for a map, unmapped for an unmap), and records nothing then; else records the range.
  std::optional<Conflict> map(std::uint64_t begin, std::uint64_t size, std::size_t event);
  std::optional<Conflict> unmap(std::uint64_t begin, std::uint64_t size, std::size_t event);
  // The first known range of [begin, begin + size) in `state`.
  std::optional<Conflict> find(std::uint64_t begin, std::uint64_t size, State state) const;

 private:
  struct Piece {
    std::uint64_t end;
    State state;
    std::size_t event;
  };
  std::optional<Conflict> set(std::uint64_t begin, std::uint64_t size, State state, std::size_t event);
  void split_at(std::uint64_t address);

  std::map<std::uint64_t, Piece> pieces_;  // begin -> piece; pieces never overlap
};

}  // namespace ferry
