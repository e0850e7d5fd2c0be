#include "offload/simd_level.h"

#include <cstdint>

// FERRY_OFFLOAD_X86_KERNELS: set by CMake on x86-64, where the avx2 and avx512 kernels are built.
#if defined(FERRY_OFFLOAD_X86_KERNELS)
#include <cpuid.h>
#endif

namespace ferry::offload {
namespace {

#if defined(FERRY_OFFLOAD_X86_KERNELS)

struct CpuFeatures {
  bool avx2 = false;    // AVX2 and F16C, with the OS saving the ymm registers
  bool avx512 = false;  // AVX-512 F, BW and VL, with the OS saving the zmm and mask registers
};

// XCR0: which register state the OS saves on a context switch (only valid when OSXSAVE is set).
std::uint64_t read_xcr0() {
  std::uint32_t low = 0;
  std::uint32_t high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0u));
  return (static_cast<std::uint64_t>(high) << 32) | low;
}

CpuFeatures detect() {
  CpuFeatures features;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return features;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  const bool avx = (ecx & (1u << 28)) != 0;
  const bool f16c = (ecx & (1u << 29)) != 0;
  if (!osxsave || !avx) return features;
  const std::uint64_t xcr0 = read_xcr0();
  const bool os_saves_ymm = (xcr0 & 0x6u) == 0x6u;     // SSE and AVX state
  const bool os_saves_zmm = (xcr0 & 0xe6u) == 0xe6u;   // plus opmask, ZMM_Hi256, Hi16_ZMM
  if (__get_cpuid_max(0, nullptr) < 7) return features;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx2 = (ebx & (1u << 5)) != 0;
  const bool avx512f = (ebx & (1u << 16)) != 0;
  const bool avx512bw = (ebx & (1u << 30)) != 0;
  const bool avx512vl = (ebx & (1u << 31)) != 0;
  features.avx2 = os_saves_ymm && avx2 && f16c;
  features.avx512 = features.avx2 && os_saves_zmm && avx512f && avx512bw && avx512vl;
  return features;
}

const CpuFeatures& features() {
  static const CpuFeatures detected = detect();  // immutable after the first call
  return detected;
}
#endif

}  // namespace

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar: return true;
#if defined(FERRY_OFFLOAD_X86_KERNELS)
    case SimdLevel::avx2: return features().avx2;
    case SimdLevel::avx512: return features().avx512;
#else
    case SimdLevel::avx2:
    case SimdLevel::avx512: return false;  // this build has no x86 kernels
#endif
  }
  return false;
}

SimdLevel best_simd_level() {
  if (simd_level_supported(SimdLevel::avx512)) return SimdLevel::avx512;
  if (simd_level_supported(SimdLevel::avx2)) return SimdLevel::avx2;
  return SimdLevel::scalar;
}

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar: return "scalar";
    case SimdLevel::avx2: return "avx2";
    case SimdLevel::avx512: return "avx512";
  }
  return "unknown";
}

std::optional<SimdLevel> parse_simd_level(std::string_view name) {
  for (SimdLevel level : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
    if (simd_level_name(level) == name) return level;
  }
  return std::nullopt;
}

}  // namespace ferry::offload
