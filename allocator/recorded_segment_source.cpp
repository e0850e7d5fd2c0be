#include "allocator/recorded_segment_source.h"

#include <iterator>
#include <utility>

namespace ferry {

RecordedSegmentSource::RecordedSegmentSource(SegmentSource& inner, std::vector<RecordedSegment> recorded)
    : inner_(inner), recorded_(std::move(recorded)) {}

bool RecordedSegmentSource::free_range(std::uintptr_t address, std::size_t bytes) const {
  auto after = live_.lower_bound(address);
  if (after != live_.end() && after->first < address + bytes) return false;
  if (after == live_.begin()) return true;
  const auto before = std::prev(after);
  return before->first + before->second <= address;
}

void* RecordedSegmentSource::allocate_segment(std::size_t bytes) {
  if (following_ && next_ < recorded_.size()) {
    const RecordedSegment& want = recorded_[next_];
    if (want.bytes == bytes && want.address != 0 && free_range(want.address, bytes)) {
      void* shadow = inner_.allocate_segment(bytes);
      if (shadow == nullptr) return nullptr;  // out of capacity: the recording waits for the retry
      ++next_;
      shadows_.emplace(want.address, shadow);
      live_.emplace(want.address, bytes);
      return reinterpret_cast<void*>(want.address);
    }
    following_ = false;  // the replay asked for something else: its later segments are its own
  }
  void* address = inner_.allocate_segment(bytes);
  if (address != nullptr) live_.emplace(reinterpret_cast<std::uintptr_t>(address), bytes);
  return address;
}

void RecordedSegmentSource::free_segment(void* address, std::size_t bytes) {
  const auto key = reinterpret_cast<std::uintptr_t>(address);
  live_.erase(key);
  if (const auto shadow = shadows_.find(key); shadow != shadows_.end()) {
    void* inner_address = shadow->second;
    shadows_.erase(shadow);
    inner_.free_segment(inner_address, bytes);
    return;
  }
  inner_.free_segment(address, bytes);
}

}  // namespace ferry
