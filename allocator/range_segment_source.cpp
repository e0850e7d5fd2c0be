#include "allocator/range_segment_source.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "allocator/allocator_config.h"
#include "allocator/allocator_errors.h"

namespace ferry {

namespace {

std::size_t span_bytes_for(std::size_t capacity, std::size_t factor, std::size_t alignment) {
  if (capacity > kMaxManagedBytes) {
    throw AllocatorConfigError("a device capacity of " + std::to_string(capacity) + " bytes is more than ferry manages (" +
                               std::to_string(kMaxManagedBytes) + " bytes, 64 PiB)");
  }
  const std::size_t rounded = (capacity + alignment - 1) / alignment * alignment;
  return rounded * factor + alignment;
}

[[noreturn]] void throw_errno(const char* call, std::uintptr_t address, std::size_t bytes) {
  throw SegmentSourceError(std::string(call) + " failed at address " + std::to_string(address) + " for " +
                           std::to_string(bytes) + " bytes: " + std::strerror(errno));
}

}  // namespace

RangeSegmentSource::RangeSegmentSource(std::uintptr_t base, std::size_t capacity, bool cuda_pages)
    : cuda_pages_(cuda_pages),
      capacity_(capacity),
      ranges_((base + kSegmentAlignment - 1) & ~(static_cast<std::uintptr_t>(kSegmentAlignment) - 1),
              span_bytes_for(capacity, kReserveFactor, kSegmentAlignment) - kSegmentAlignment) {}

bool RangeSegmentSource::take_capacity(std::size_t bytes) {
  if (bytes > capacity_ - used_bytes_) return false;
  used_bytes_ += bytes;
  return true;
}

void* RangeSegmentSource::allocate_segment(std::size_t bytes) {
  if (!take_capacity(bytes)) return nullptr;
  auto address = ranges_.allocate(bytes, kSegmentAlignment);
  if (!address) {
    used_bytes_ -= bytes;
    return nullptr;
  }
  commit(*address, bytes);
  return reinterpret_cast<void*>(*address);
}

void RangeSegmentSource::free_segment(void* address, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  decommit(start, bytes);
  ranges_.free(start, bytes);
  used_bytes_ -= bytes;
}

void* RangeSegmentSource::reserve_address_range(std::size_t bytes) {
  auto address = ranges_.allocate(bytes, kSegmentAlignment);
  return address ? reinterpret_cast<void*>(*address) : nullptr;
}

void RangeSegmentSource::release_address_range(void* address, std::size_t bytes) {
  ranges_.free(reinterpret_cast<std::uintptr_t>(address), bytes);
}

void RangeSegmentSource::check_whole_pages(const char* call, void* address, std::size_t bytes) const {
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  const std::size_t page = page_granularity();
  if (bytes == 0 || start % page != 0 || bytes % page != 0) {
    throw SegmentSourceError(std::string(call) + " of " + std::to_string(bytes) + " bytes at address " + std::to_string(start) +
                             ": pages are mapped and unmapped whole, in multiples of " + std::to_string(page) + " bytes");
  }
}

bool RangeSegmentSource::map_pages(void* address, std::size_t bytes) {
  check_whole_pages("map", address, bytes);
  if (!take_capacity(bytes)) return false;
  commit(reinterpret_cast<std::uintptr_t>(address), bytes);
  return true;
}

void RangeSegmentSource::unmap_pages(void* address, std::size_t bytes) {
  check_whole_pages("unmap", address, bytes);
  decommit(reinterpret_cast<std::uintptr_t>(address), bytes);
  used_bytes_ -= bytes;
}

HostSegmentSource::HostSegmentSource(std::size_t capacity)
    : HostSegmentSource(
          [&] {
            const std::size_t bytes = span_bytes_for(capacity, kReserveFactor, kSegmentAlignment);
            void* span = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (span == MAP_FAILED) throw_errno("mmap (reserve host span)", 0, bytes);
            return span;
          }(),
          capacity) {}

HostSegmentSource::HostSegmentSource(void* span, std::size_t capacity)
    : RangeSegmentSource(reinterpret_cast<std::uintptr_t>(span), capacity),
      span_(span),
      span_bytes_(span_bytes_for(capacity, kReserveFactor, kSegmentAlignment)) {}

HostSegmentSource::~HostSegmentSource() { ::munmap(span_, span_bytes_); }

void HostSegmentSource::commit(std::uintptr_t address, std::size_t bytes) {
  if (::mprotect(reinterpret_cast<void*>(address), bytes, PROT_READ | PROT_WRITE) != 0) {
    throw_errno("mprotect (commit host pages)", address, bytes);
  }
}

void HostSegmentSource::decommit(std::uintptr_t address, std::size_t bytes) {
  void* start = reinterpret_cast<void*>(address);
  if (::madvise(start, bytes, MADV_DONTNEED) != 0) throw_errno("madvise (release host pages)", address, bytes);
  if (::mprotect(start, bytes, PROT_NONE) != 0) throw_errno("mprotect (decommit host pages)", address, bytes);
}

AddressSpaceSegmentSource::AddressSpaceSegmentSource(std::size_t capacity, bool cuda_pages)
    : RangeSegmentSource(kBase, capacity, cuda_pages) {}

}  // namespace ferry
