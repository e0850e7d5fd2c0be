// Allocator settings, read from FERRY_ALLOC_CONF (same keys and syntax as PYTORCH_CUDA_ALLOC_CONF)
// or set through the API. An unknown key or a malformed value is an AllocatorConfigError naming it.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace ferry {

// roundup_power2_divisions is set per power-of-two band of the request size: band k holds
// [2^k MiB, 2^(k+1) MiB), band 0 also everything below 1 MiB, the last band everything from 32 GiB up.
inline constexpr std::size_t kRoundupPowerOfTwoBands = 16;
// The most bytes one device (and so one allocation) managed by ferry may hold: 64 PiB, far past any
// device, and far enough below 2^64 that sizes rounded up or multiplied by the range reserve never wrap.
inline constexpr std::size_t kMaxManagedBytes = std::size_t{1} << 56;
// Bounds of FERRY_ALLOC_CONF's values (each named in its error).
inline constexpr std::size_t kMaxRoundupDivisions = 1024;
inline constexpr std::size_t kMaxTraceEntries = 1'000'000;

struct AllocatorConfig {
  bool expandable_segments = false;
  // Whether expandable_segments was given (FERRY_ALLOC_CONF, parse): if not, the device's kind chooses
  // it (engine/core's with_device_defaults: on for cpu and meta, off for cuda, as PyTorch).
  bool expandable_segments_set = false;
  // Requests below it never take a cached block at or above it; blocks at or above it are not split.
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
  // Fraction of capacity above which cached blocks are reclaimed before new segments are requested
  // (0 disables).
  double garbage_collection_threshold = 0.0;
  // 0 or 1: plain 512-byte rounding for that band.
  std::array<std::size_t, kRoundupPowerOfTwoBands> roundup_power2_divisions{};
  // Entries kept by the allocation trace ring buffer (0: trace off).
  std::size_t trace_entries = 0;

  // Parses "key:value,key:value". Keys: expandable_segments, max_split_size_mb,
  // garbage_collection_threshold, roundup_power2_divisions (N or [256:1,512:2,>:8]), trace_entries.
  static AllocatorConfig parse(std::string_view text);
  // FERRY_ALLOC_CONF from the environment, or the defaults when it is unset.
  static AllocatorConfig from_environment();
  std::string to_string() const;
  bool max_split_size_set() const { return max_split_size != std::numeric_limits<std::size_t>::max(); }
};

}  // namespace ferry
