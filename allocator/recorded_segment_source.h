// RecordedSegmentSource: a trace replay's segments at the addresses the traced program's cudaMalloc
// returned, in the order it returned them, for as long as the replay asks for the same sizes in the same
// order. The caching allocator breaks ties between equal free blocks by address, so only the recorded
// addresses reproduce the traced allocator's choices (an H200's gpt2 snapshot: increasing synthetic
// addresses split other blocks and allocated 4,849,664 B more at the peak than PyTorch counted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/segment_source.h"

namespace ferry {

struct RecordedSegment {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
};

class RecordedSegmentSource final : public SegmentSource {
 public:
  // `inner` serves every segment (a recorded one takes a shadow segment of its size there, so capacity is
  // counted once) and everything past the first request that differs from the recording.
  RecordedSegmentSource(SegmentSource& inner, std::vector<RecordedSegment> recorded);

  std::string name() const override { return inner_.name(); }
  std::size_t capacity() const override { return inner_.capacity(); }
  std::size_t used_bytes() const override { return inner_.used_bytes(); }
  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void* address, std::size_t bytes) override;

  bool supports_expandable_segments() const override { return inner_.supports_expandable_segments(); }
  std::size_t page_granularity() const override { return inner_.page_granularity(); }
  std::size_t expandable_page_bytes(bool small_pool) const override { return inner_.expandable_page_bytes(small_pool); }
  void* reserve_address_range(std::size_t bytes) override { return inner_.reserve_address_range(bytes); }
  void release_address_range(void* address, std::size_t bytes) override { inner_.release_address_range(address, bytes); }
  bool map_pages(void* address, std::size_t bytes) override { return inner_.map_pages(address, bytes); }
  void unmap_pages(void* address, std::size_t bytes) override { inner_.unmap_pages(address, bytes); }

  // Segments handed out at their recorded addresses, and how many the recording holds.
  std::size_t followed() const { return next_; }
  std::size_t recorded() const { return recorded_.size(); }

 private:
  // True when [address, address + bytes) overlaps no segment handed out and still live.
  bool free_range(std::uintptr_t address, std::size_t bytes) const;

  SegmentSource& inner_;
  std::vector<RecordedSegment> recorded_;
  std::size_t next_ = 0;
  bool following_ = true;
  std::unordered_map<std::uintptr_t, void*> shadows_;  // recorded address -> its segment in `inner_`
  std::map<std::uintptr_t, std::size_t> live_;         // every live segment handed out: start -> bytes
};

}  // namespace ferry
