// PageLedgerSource: a segment source for tests that forwards to a real one (host or meta) and keeps a
// ledger of every page mapped, segment handed out and address range reserved. It records a violation
// when the allocator maps a mapped page, unmaps one that is not mapped or is still under a live
// allocation, or asks for a range that is not whole pages; and it refuses releases on demand (a failed
// madvise or driver call), so tests can show the allocator survives them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "allocator/allocator_errors.h"
#include "allocator/segment_source.h"

namespace ferry::testing {

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
    for (std::uintptr_t page = key(address); page < key(address) + bytes; page += page_) {
      if (mapped_.contains(page)) violation("release of a range with pages still mapped", address, bytes);
    }
    if (it != reserved_.end()) reserved_.erase(it);
    inner_->release_address_range(address, bytes);
  }
  bool map_pages(void* address, std::size_t bytes) override {
    check_whole_pages("map", address, bytes);
    for (std::uintptr_t page = key(address); page < key(address) + bytes; page += page_) {
      if (mapped_.contains(page)) violation("map of a page already mapped", address, bytes);
    }
    if (!inner_->map_pages(address, bytes)) return false;
    for (std::uintptr_t page = key(address); page < key(address) + bytes; page += page_) mapped_.insert(page);
    return true;
  }
  void unmap_pages(void* address, std::size_t bytes) override {
    refuse_if_asked("unmap_pages");
    check_whole_pages("unmap", address, bytes);
    for (std::uintptr_t page = key(address); page < key(address) + bytes; page += page_) {
      if (!mapped_.contains(page)) violation("unmap of a page that is not mapped", address, bytes);
    }
    if (live_overlaps && live_overlaps(key(address), bytes)) violation("unmap under a live allocation", address, bytes);
    for (std::uintptr_t page = key(address); page < key(address) + bytes; page += page_) mapped_.erase(page);
    inner_->unmap_pages(address, bytes);
  }

  // The next `count` releases (unmap_pages, free_segment, release_address_range) throw as a failed
  // madvise or driver call would.
  void refuse_releases(int count) { refusals_left_ = count; }
  int refused() const { return refused_; }
  // Whether a live allocation overlaps [address, address + bytes) (set by a test that tracks them).
  std::function<bool(std::uintptr_t, std::size_t)> live_overlaps;

  const std::set<std::uintptr_t>& mapped_pages() const { return mapped_; }
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
  std::set<std::uintptr_t> mapped_;
  std::map<std::uintptr_t, std::size_t> segments_;
  std::map<std::uintptr_t, std::size_t> reserved_;
  std::vector<std::string> violations_;
  int refusals_left_ = 0;
  int refused_ = 0;
};

}  // namespace ferry::testing
