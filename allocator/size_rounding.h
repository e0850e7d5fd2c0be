// Size classes of the caching allocator: how requests round (512 B granularity, optional
// power-of-two divisions), which pool serves them, and how large a new segment is.
#pragma once

#include <cstddef>

#include "allocator/allocator_config.h"

namespace ferry {

inline constexpr std::size_t kMinBlockSize = 512;           // every block is a multiple of this
inline constexpr std::size_t kSmallSize = 1u << 20;         // requests up to 1 MiB use the small pool
inline constexpr std::size_t kSmallBuffer = 2u << 20;       // small-pool segments are 2 MiB
inline constexpr std::size_t kLargeBuffer = 20u << 20;      // large requests under 10 MiB share 20 MiB
inline constexpr std::size_t kMinLargeAlloc = 10u << 20;    // from 10 MiB up a segment fits the request
inline constexpr std::size_t kRoundLarge = 2u << 20;        // ... rounded up to a multiple of 2 MiB

// The band of roundup_power2_divisions that applies to `size`.
std::size_t roundup_power2_band(std::size_t size);

// The block size a request of `size` bytes is served with. Monotonic, idempotent, >= size, and a
// multiple of kMinBlockSize.
std::size_t round_size(std::size_t size, const AllocatorConfig& config);

// True when a rounded size is served from the small pool.
constexpr bool is_small_request(std::size_t rounded_size) { return rounded_size <= kSmallSize; }

// The segment size requested from the source for a rounded request.
constexpr std::size_t segment_size_for(std::size_t rounded_size) {
  if (rounded_size <= kSmallSize) return kSmallBuffer;
  if (rounded_size < kMinLargeAlloc) return kLargeBuffer;
  return (rounded_size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

}  // namespace ferry
