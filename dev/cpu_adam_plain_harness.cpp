// Experiment (dev/, not built by CMake): CpuAdam::step timed by a plain loop, as a peer's harness would
// call it, on buffers of a chosen alignment, beside what benchmarks/cpu_adam_benchmark.cpp measures.
// Question it answers: is the Google Benchmark program slower than the kernel itself, and why?
// Build (after the main build): see dev/README.md.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "offload/cpu_adam.h"

int main(int argc, char** argv) {
  const std::int64_t count = argc > 1 ? std::atoll(argv[1]) : 10'000'000;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::size_t alignment = argc > 3 ? static_cast<std::size_t>(std::atoll(argv[3])) : 64;  // 16: what new float[] gives
  const std::size_t offset = alignment < 64 ? alignment : 0;  // misalign a 64-byte block by `alignment`
  auto make = [&] {
    auto* raw = static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>(count) * 4 + 64));
    return std::unique_ptr<float, decltype(&std::free)>(raw, &std::free);
  };
  auto master = make(), m = make(), v = make(), g = make();
  float* p[4] = {master.get(), m.get(), v.get(), g.get()};
  for (float*& each : p) each = reinterpret_cast<float*>(reinterpret_cast<char*>(each) + offset);
  for (std::int64_t i = 0; i < count; ++i) {
    const float unit = static_cast<float>((static_cast<std::uint64_t>(i) * 2654435761u) >> 8 & 0xFFFFFF) / 16777216.0f;
    p[0][i] = unit - 0.5f;
    p[1][i] = 0.01f * (unit - 0.5f);
    p[2][i] = 1e-4f * unit;
    p[3][i] = 0.5f - unit;
  }
  ferry::offload::CpuAdamOptions options;
  options.threads = threads;
  ferry::offload::CpuAdam adam(options);
  const ferry::offload::AdamWSpan span{p[0], p[1], p[2], p[3], nullptr, ferry::DType::f32, count, true};
  ferry::offload::AdamWSettings settings;
  settings.weight_decay = 0.01f;
  adam.step({&span, 1}, settings, 1, 1.0f);  // warm up
  const int repeats = 20;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 2; step < 2 + repeats; ++step) adam.step({&span, 1}, settings, step, 1.0f);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("count %lld threads %d offset %zu: %.1f Melem/s\n", static_cast<long long>(count), threads, offset,
              static_cast<double>(count) * repeats / seconds / 1e6);
  return 0;
}
