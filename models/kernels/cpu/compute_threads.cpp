#include "models/kernels/cpu/compute_threads.h"

#include <algorithm>
#include <thread>

#include <cblas.h>
#include <omp.h>

#include <array>
#include <stdexcept>
#include <string_view>

namespace ferry::cpu {

void set_compute_threads(int threads) {
  // More threads than 4 per core only oversubscribe (a typo such as 10000 would start that many).
  const int most = 4 * std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (threads < 0 || threads > most) {
    throw std::invalid_argument("--threads must be from 0 (all cores) to " + std::to_string(most) + " (4 per core here), got " +
                                std::to_string(threads));
  }
  if (threads == 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int compute_threads() { return omp_get_max_threads(); }

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

std::string better_blas_core() {
  constexpr std::array<std::string_view, 8> kPreAvx2 = {"prescott", "core2", "penryn", "dunnington",
                                                        "nehalem", "atom", "katmai", "sandybridge"};
  const std::string name = blas_core_name();
  std::string lower;
  for (char c : name) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  bool fallback = false;
  for (std::string_view each : kPreAvx2) fallback = fallback || lower == each;
#if defined(__x86_64__)
  if (!fallback) return {};
  // A CPU newer than this OpenBLAS knows (0.3.21 falls back to Prescott on Sapphire and Emerald Rapids):
  // its AVX-512 kernels where the CPU has AVX-512 (1.6-1.8x the Haswell kernels' GEMM rate on an Emerald
  // Rapids core), else AVX2's.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return {};
}

}  // namespace ferry::cpu
