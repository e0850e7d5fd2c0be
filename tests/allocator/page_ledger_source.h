// PageLedgerSource: a segment source for tests that forwards to a real one (host or meta) and keeps a
// ledger of every page mapped, segment handed out and address range reserved. It records a violation
// when the allocator maps a mapped page, unmaps one that is not mapped or is still under a live
// allocation, or asks for a range that is not whole pages; and it refuses releases on demand (a failed
// madvise or driver call), so tests can show the allocator survives them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "allocator/allocator_errors.h"
#include "allocator/segment_source.h"

namespace ferry::testing {

// Disjoint address ranges, adjacent ones merged: [begin, end) by begin.
class IntervalSet {
 public:
  bool overlaps(std::uintptr_t address, std::size_t bytes) const {
    auto it = ranges_.upper_bound(address);
    if (it != ranges_.begin() && std::prev(it)->second > address) return true;
    return it != ranges_.end() && it->first < address + bytes;
  }
  bool covers(std::uintptr_t address, std::size_t bytes) const {
    auto it = ranges_.upper_bound(address);
    return it != ranges_.begin() && std::prev(it)->second >= address + bytes;
  }
  void insert(std::uintptr_t address, std::size_t bytes) {
    std::uintptr_t begin = address, end = address + bytes;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) {
      --it;
      begin = it->first;
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    while (it != ranges_.end() && it->first <= end) {
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_[begin] = end;
  }
  void erase(std::uintptr_t address, std::size_t bytes) {
    const std::uintptr_t begin = address, end = address + bytes;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin()) --it;
    while (it != ranges_.end() && it->first < end) {
      const auto [first, last] = *it;
      it = ranges_.erase(it);
      if (first < begin) ranges_[first] = std::min(last, begin);
      if (last > end) ranges_[end] = last;
    }
  }
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const auto& [begin, end] : ranges_) total += end - begin;
    return total;
  }
  bool empty() const { return ranges_.empty(); }
  bool operator==(const IntervalSet& other) const { return ranges_ == other.ranges_; }
  const std::map<std::uintptr_t, std::uintptr_t>& ranges() const { return ranges_; }

 private:
  std::map<std::uintptr_t, std::uintptr_t> ranges_;
};

class PageLedgerSource final : public SegmentSource {
 public:
  explicit PageLedgerSource(std::unique_ptr<SegmentSource> inner) : inner_(std::move(inner)), page_(inner_->page_granularity()) {}

  std::string name() const override { return inner_->name(); }
  std::size_t capacity() const override { return inner_->capacity(); }
  std::size_t used_bytes() const override { return inner_->used_bytes(); }
  std::size_t page_granularity() const override { return page_; }
  bool supports_expandable_segments() const override { return inner_->supports_expandable_segments(); }
  void synchronize_device() override { inner_->synchronize_device(); }

  void* allocate_segment(std::size_t bytes) override {
    void* address = inner_->allocate_segment(bytes);
    if (address != nullptr) segments_[key(address)] = bytes;
    return address;
  }
  void free_segment(void* address, std::size_t bytes) override {
    refuse_if_asked("free_segment");
    auto it = segments_.find(key(address));
    if (it == segments_.end() || it->second != bytes) violation("free of a segment that was not handed out", address, bytes);
    if (it != segments_.end()) segments_.erase(it);
    inner_->free_segment(address, bytes);
  }
  void* reserve_address_range(std::size_t bytes) override {
    void* address = inner_->reserve_address_range(bytes);
    if (address != nullptr) reserved_[key(address)] = bytes;
    return address;
  }
  void release_address_range(void* address, std::size_t bytes) override {
    refuse_if_asked("release_address_range");
    auto it = reserved_.find(key(address));
    if (it == reserved_.end() || it->second != bytes) violation("release of a range that was not reserved", address, bytes);
    if (mapped_.overlaps(key(address), bytes)) violation("release of a range with pages still mapped", address, bytes);
    if (it != reserved_.end()) reserved_.erase(it);
    inner_->release_address_range(address, bytes);
  }
  bool map_pages(void* address, std::size_t bytes) override {
    check_whole_pages("map", address, bytes);
    if (mapped_.overlaps(key(address), bytes)) violation("map of a page already mapped", address, bytes);
    if (!inner_->map_pages(address, bytes)) return false;
    mapped_.insert(key(address), bytes);
    return true;
  }
  void unmap_pages(void* address, std::size_t bytes) override {
    refuse_if_asked("unmap_pages");
    check_whole_pages("unmap", address, bytes);
    if (!mapped_.covers(key(address), bytes)) violation("unmap of a page that is not mapped", address, bytes);
    if (live_overlaps && live_overlaps(key(address), bytes)) violation("unmap under a live allocation", address, bytes);
    mapped_.erase(key(address), bytes);
    inner_->unmap_pages(address, bytes);
  }

  // The next `count` releases (unmap_pages, free_segment, release_address_range) throw as a failed
  // madvise or driver call would.
  void refuse_releases(int count) { refusals_left_ = count; }
  int refused() const { return refused_; }
  // Whether a live allocation overlaps [address, address + bytes) (set by a test that tracks them).
  std::function<bool(std::uintptr_t, std::size_t)> live_overlaps;

  const IntervalSet& mapped_pages() const { return mapped_; }
  std::size_t segments_held() const { return segments_.size(); }
  std::size_t ranges_reserved() const { return reserved_.size(); }
  const std::vector<std::string>& violations() const { return violations_; }

 private:
  static std::uintptr_t key(void* address) { return reinterpret_cast<std::uintptr_t>(address); }
  void check_whole_pages(const char* call, void* address, std::size_t bytes) {
    if (bytes == 0 || key(address) % page_ != 0 || bytes % page_ != 0) violation(std::string(call) + " of a range that is not whole pages", address, bytes);
  }
  void refuse_if_asked(const char* call) {
    if (refusals_left_ <= 0) return;
    --refusals_left_;
    ++refused_;
    throw SegmentSourceError(std::string(call) + " refused (injected failure)");
  }
  void violation(const std::string& what, void* address, std::size_t bytes) {
    violations_.push_back(what + " at " + std::to_string(key(address)) + " for " + std::to_string(bytes) + " bytes");
  }

  std::unique_ptr<SegmentSource> inner_;
  std::size_t page_;
  IntervalSet mapped_;
  std::map<std::uintptr_t, std::size_t> segments_;
  std::map<std::uintptr_t, std::size_t> reserved_;
  std::vector<std::string> violations_;
  int refusals_left_ = 0;
  int refused_ = 0;
};

}  // namespace ferry::testing
