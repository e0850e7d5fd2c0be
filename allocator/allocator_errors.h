// Typed errors raised by the allocator layer. Each carries the context a user needs to act on it:
// the bytes asked, the setting that was wrong, the address that was not ours.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "allocator/memory_category.h"

namespace ferry {

class AllocatorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised when a request cannot be satisfied even after the out-of-memory ladder ran.
// The allocator's state is unchanged apart from its cache being released and num_ooms counted.
class OutOfMemoryError : public AllocatorError {
 public:
  OutOfMemoryError(const std::string& message, std::size_t requested_bytes, std::size_t rounded_bytes,
                   MemoryCategory category)
      : AllocatorError(message),
        requested_bytes_(requested_bytes),
        rounded_bytes_(rounded_bytes),
        category_(category) {}
  std::size_t requested_bytes() const { return requested_bytes_; }
  std::size_t rounded_bytes() const { return rounded_bytes_; }
  MemoryCategory category() const { return category_; }

 private:
  std::size_t requested_bytes_;
  std::size_t rounded_bytes_;
  MemoryCategory category_;
};

// A bad FERRY_ALLOC_CONF / API setting: unknown key or malformed value.
class AllocatorConfigError : public AllocatorError {
 public:
  using AllocatorError::AllocatorError;
};

// free() of an address the allocator never handed out, or a double free.
class InvalidFreeError : public AllocatorError {
 public:
  using AllocatorError::AllocatorError;
};

// A segment source failed for a reason other than running out of memory (a driver or OS error).
class SegmentSourceError : public AllocatorError {
 public:
  using AllocatorError::AllocatorError;
};

}  // namespace ferry
