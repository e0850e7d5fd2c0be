// CpuAdam throughput beside a STREAM-style triad in the same process, on the same buffers, threads
// and tiles: elements/s and GB/s at 1e6, 1e7, 1e8 and 1e9 elements, 1 and 2 threads.
// - AdamW moves 28 bytes per element: reads gradient, master, m, v (16) and writes master, m, v (12);
//   every written line was just read, so there is no extra write-allocate traffic.
// - Triad: a[i] = b[i] + s * c[i] as the compiler vectorizes it (baseline x86-64). STREAM counts 12
//   bytes per element, but the CPU also reads each line of a before writing it (write-allocate), so
//   "bytes_per_second" counts the 16 bytes that move; "stream_bytes_per_second" counts 12.
// - TriadNonTemporal: the same triad with AVX-512 and streaming (non-temporal) stores, which skip the
//   write-allocate read: 12 bytes per element move and are counted. Skipped without AVX-512.
// The script takes the faster triad as the bandwidth to compare with. Sizes whose buffers (16 bytes
// per element) do not fit in the available memory are skipped with a note. Flags:
// --max_elements=N (default 1e9), then Google Benchmark's own.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <immintrin.h>

#include "offload/cpu_adam.h"
#include "offload/host_thread_pool.h"

namespace ferry::offload {
namespace {

constexpr std::int64_t kAdamBytesPerElement = 28;
constexpr std::int64_t kTriadBytesPerElement = 16;  // with write-allocate
constexpr std::int64_t kStreamTriadBytesPerElement = 12;  // as STREAM counts, and with streaming stores
constexpr std::int64_t kTile = std::int64_t{1} << 16;  // CpuAdam's default tile

// The four fp32 arrays of one size, shared by the size's benchmarks (the triad uses three of them).
struct Buffers {
  std::int64_t count = 0;
  std::unique_ptr<float[]> master, first_moment, second_moment, gradient;
};
Buffers& buffers() {
  static Buffers shared;
  return shared;
}

// MemAvailable from /proc/meminfo (0 when unreadable).
std::uint64_t available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024u;
  }
  return 0;
}

// Fills the buffers with bounded values (first touch, in parallel so the pages spread like the work).
bool prepare(std::int64_t count, HostThreadPool& pool) {
  Buffers& b = buffers();
  if (b.count == count) return true;
  b = Buffers{};
  const auto n = static_cast<std::size_t>(count);
  b.master.reset(new (std::nothrow) float[n]);
  b.first_moment.reset(new (std::nothrow) float[n]);
  b.second_moment.reset(new (std::nothrow) float[n]);
  b.gradient.reset(new (std::nothrow) float[n]);
  if (!b.master || !b.first_moment || !b.second_moment || !b.gradient) {
    b = Buffers{};
    return false;
  }
  pool.run((count + kTile - 1) / kTile, [&](std::int64_t tile) {
    const std::int64_t end = std::min(count, (tile + 1) * kTile);
    for (std::int64_t i = tile * kTile; i < end; ++i) {
      const auto hash = static_cast<std::uint32_t>(static_cast<std::uint64_t>(i) * 2654435761u);
      const float unit = static_cast<float>(hash >> 8) * (1.0f / 16777216.0f);  // [0, 1)
      const auto k = static_cast<std::size_t>(i);
      b.master[k] = unit - 0.5f;
      b.first_moment[k] = 0.01f * (unit - 0.5f);
      b.second_moment[k] = 1e-4f * unit;
      b.gradient[k] = 0.5f - unit;
    }
  });
  b.count = count;
  return true;
}

// Whether `count` elements' buffers fit in available memory (the current ones are freed first), with
// 1 GiB to spare; otherwise skips the benchmark with a note.
bool fits(benchmark::State& state, std::int64_t count) {
  if (buffers().count == count) return true;
  const std::uint64_t needed = static_cast<std::uint64_t>(count) * 16u;
  const std::uint64_t available = available_bytes() + static_cast<std::uint64_t>(buffers().count) * 16u;
  if (needed + (std::uint64_t{1} << 30) > available) {
    const std::string note = "skipped: needs " + std::to_string(needed >> 20) + " MiB, " +
                             std::to_string(available >> 20) + " MiB available";
    std::fprintf(stderr, "note: %lld elements %s\n", static_cast<long long>(count), note.c_str());
    state.SkipWithError(note.c_str());
    return false;
  }
  return true;
}

void set_counters(benchmark::State& state, std::int64_t count, std::int64_t bytes, const char* extra_name,
                  std::int64_t extra_bytes) {
  const auto done = static_cast<double>(state.iterations()) * static_cast<double>(count);
  state.counters["elements_per_second"] = benchmark::Counter(done, benchmark::Counter::kIsRate);
  state.counters["bytes_per_second"] = benchmark::Counter(done * static_cast<double>(bytes), benchmark::Counter::kIsRate);
  if (extra_name != nullptr) {
    state.counters[extra_name] = benchmark::Counter(done * static_cast<double>(extra_bytes), benchmark::Counter::kIsRate);
  }
}

void AdamW(benchmark::State& state) {
  const std::int64_t count = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  if (!fits(state, count)) return;
  CpuAdamOptions options;
  options.threads = threads;
  CpuAdam adam(options);
  HostThreadPool init_pool(threads, true);
  if (!prepare(count, init_pool)) {
    state.SkipWithError("allocation failed");
    return;
  }
  Buffers& b = buffers();
  const AdamWSpan span{b.master.get(), b.first_moment.get(), b.second_moment.get(), b.gradient.get(),
                       nullptr, DType::f32, count, true};
  AdamWSettings settings;
  settings.weight_decay = 0.01f;
  std::int64_t step = 0;
  for (auto _ : state) adam.step({&span, 1}, settings, ++step, 1.0f);
  set_counters(state, count, kAdamBytesPerElement, nullptr, 0);
  state.SetLabel(std::string(simd_level_name(adam.simd())));
}

void Triad(benchmark::State& state) {
  const std::int64_t count = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  if (!fits(state, count)) return;
  HostThreadPool pool(threads, true);
  if (!prepare(count, pool)) {
    state.SkipWithError("allocation failed");
    return;
  }
  Buffers& buffer = buffers();
  float* a = buffer.master.get();
  const float* b = buffer.first_moment.get();
  const float* c = buffer.gradient.get();
  const float scalar = 0.999f;  // keeps a bounded when it feeds back through later steps
  for (auto _ : state) {
    pool.run((count + kTile - 1) / kTile, [&](std::int64_t tile) {
      const std::int64_t end = std::min(count, (tile + 1) * kTile);
      for (std::int64_t i = tile * kTile; i < end; ++i) a[i] = b[i] + scalar * c[i];
    });
    benchmark::ClobberMemory();
  }
  set_counters(state, count, kTriadBytesPerElement, "stream_bytes_per_second", kStreamTriadBytesPerElement);
}

// a[i] = b[i] + s * c[i] for i in [begin, end) with 64-byte streaming stores (a's lines are not read).
__attribute__((target("avx512f"))) void triad_non_temporal(float* a, const float* b, const float* c, float s,
                                                           std::int64_t begin, std::int64_t end) {
  std::int64_t i = begin;
  for (; i < end && reinterpret_cast<std::uintptr_t>(a + i) % 64 != 0; ++i) a[i] = b[i] + s * c[i];
  const __m512 scalar = _mm512_set1_ps(s);
  for (; i + 16 <= end; i += 16) {
    _mm512_stream_ps(a + i, _mm512_add_ps(_mm512_loadu_ps(b + i), _mm512_mul_ps(scalar, _mm512_loadu_ps(c + i))));
  }
  for (; i < end; ++i) a[i] = b[i] + s * c[i];
  _mm_sfence();
}

void TriadNonTemporal(benchmark::State& state) {
  const std::int64_t count = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  if (!simd_level_supported(SimdLevel::avx512)) {
    state.SkipWithError("no AVX-512 here");
    return;
  }
  if (!fits(state, count)) return;
  HostThreadPool pool(threads, true);
  if (!prepare(count, pool)) {
    state.SkipWithError("allocation failed");
    return;
  }
  Buffers& buffer = buffers();
  float* a = buffer.master.get();
  const float* b = buffer.first_moment.get();
  const float* c = buffer.gradient.get();
  for (auto _ : state) {
    pool.run((count + kTile - 1) / kTile, [&](std::int64_t tile) {
      triad_non_temporal(a, b, c, 0.999f, tile * kTile, std::min(count, (tile + 1) * kTile));
    });
    benchmark::ClobberMemory();
  }
  set_counters(state, count, kStreamTriadBytesPerElement, nullptr, 0);
}

}  // namespace
}  // namespace ferry::offload

int main(int argc, char** argv) {
  std::int64_t max_elements = 1000000000;
  std::vector<char*> arguments;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--max_elements=", 15) == 0) {
      max_elements = static_cast<std::int64_t>(std::strtod(argv[i] + 15, nullptr));
    } else {
      arguments.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(arguments.size());
  // Per size: AdamW then the triad, so each size's buffers are made once.
  for (std::int64_t elements : {std::int64_t{1000000}, std::int64_t{10000000}, std::int64_t{100000000},
                                std::int64_t{1000000000}}) {
    if (elements > max_elements) break;
    for (int threads : {1, 2}) {
      benchmark::RegisterBenchmark("AdamW", ferry::offload::AdamW)
          ->Args({elements, threads})->ArgNames({"elements", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
    }
    for (int threads : {1, 2}) {
      benchmark::RegisterBenchmark("Triad", ferry::offload::Triad)
          ->Args({elements, threads})->ArgNames({"elements", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
      benchmark::RegisterBenchmark("TriadNonTemporal", ferry::offload::TriadNonTemporal)
          ->Args({elements, threads})->ArgNames({"elements", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
    }
  }
  benchmark::Initialize(&count, arguments.data());
  if (benchmark::ReportUnrecognizedArguments(count, arguments.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
