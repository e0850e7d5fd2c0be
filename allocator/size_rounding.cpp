#include "allocator/size_rounding.h"

#include <algorithm>
#include <bit>

namespace ferry {

std::size_t roundup_power2_band(std::size_t size) {
  if (size < (std::size_t{1} << 20)) return 0;
  const std::size_t log_size = static_cast<std::size_t>(std::bit_width(size) - 1);
  return std::min<std::size_t>(log_size - 20, kRoundupPowerOfTwoBands - 1);
}

std::size_t round_size(std::size_t size, const AllocatorConfig& config) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const std::size_t divisions = config.roundup_power2_divisions[roundup_power2_band(size)];
  if (divisions > 1 && size > kMinBlockSize * divisions && !std::has_single_bit(size)) {
    // Round up to the next of `divisions` equal steps between the surrounding powers of two.
    const std::size_t floor_power = std::bit_floor(size);
    const std::size_t step = floor_power / divisions;
    return (size + step - 1) / step * step;
  }
  return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

}  // namespace ferry
