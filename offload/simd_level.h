// SIMD levels the host kernels can run at, chosen at run time from cpuid and the OS's saved vector
// state (xgetbv), so one binary runs its fastest path on every x86-64 machine and its scalar path
// everywhere else.
#pragma once

#include <optional>
#include <string_view>

namespace ferry::offload {

enum class SimdLevel : unsigned char { scalar, avx2, avx512 };

// The best level this CPU and OS support (avx2 needs AVX2 and F16C; avx512 needs AVX-512 F/BW/VL).
SimdLevel best_simd_level();
bool simd_level_supported(SimdLevel level);
std::string_view simd_level_name(SimdLevel level);
// "scalar", "avx2", "avx512"; nullopt for anything else.
std::optional<SimdLevel> parse_simd_level(std::string_view name);

}  // namespace ferry::offload
