#include "engine/plan/cpu_calibration.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <limits>
#include <vector>

#include "models/kernels/cpu/blas.h"
#include "offload/nvme_store.h"

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

double measure_nvme_bandwidth(const std::string& directory, std::size_t bytes) {
  offload::NvmeStore store(offload::nvme_store_options(directory, 32, std::size_t{1} << 20));
  bytes = std::max(store.chunk_bytes(), bytes / store.chunk_bytes() * store.chunk_bytes());
  struct Free {
    void operator()(std::byte* memory) const { std::free(memory); }
  };
  const std::size_t alignment = std::max<std::size_t>(store.alignment(), 4096);
  const std::unique_ptr<std::byte, Free> buffer(static_cast<std::byte*>(std::aligned_alloc(alignment, bytes)));
  if (!buffer) throw std::bad_alloc();
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;  // incompressible bytes
  for (std::size_t offset = 0; offset + 8 <= bytes; offset += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(buffer.get() + offset, &state, 8);
  }
  const std::span<std::byte> registered(buffer.get(), bytes);
  store.register_buffers(std::span<const std::span<std::byte>>(&registered, 1));
  const offload::FileId file = store.create_file("ferry-plan-nvme-calibration.bin", bytes);
  const std::string path = store.path(file);
  struct RemoveFile {  // whatever happens below
    const std::string& path;
    ~RemoveFile() {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  } remove_file{path};
  const auto timed = [&](bool write) {
    const auto start = std::chrono::steady_clock::now();
    const offload::IoRequest request = write ? store.write_async(file, 0, buffer.get(), bytes) : store.read_async(file, 0, buffer.get(), bytes);
    store.wait(request);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double write_seconds = timed(true);
  const double read_seconds = timed(false);
  return static_cast<double>(bytes) / std::max({write_seconds, read_seconds, 1e-9});
}

}  // namespace ferry
