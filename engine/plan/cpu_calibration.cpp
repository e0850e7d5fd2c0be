#include "engine/plan/cpu_calibration.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "models/kernels/cpu/blas.h"

namespace ferry {

double measure_cpu_gemm_flops() {
  constexpr std::int64_t m = 512, k = 768, n = 3072;
  std::vector<float> a(static_cast<std::size_t>(m * k), 0.5f), b(static_cast<std::size_t>(k * n), 0.25f), c(static_cast<std::size_t>(m * n));
  double best = std::numeric_limits<double>::max();
  for (int repeat = 0; repeat < 6; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (repeat > 0) best = std::min(best, seconds);  // the first warms the caches and the thread pool
  }
  return 2.0 * static_cast<double>(m * n * k) / std::max(best, 1e-9);
}

}  // namespace ferry
