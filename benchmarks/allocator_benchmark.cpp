// Allocator benchmarks, each beside its peer in the same run:
// - cache-hit malloc+free latency, 512 B to 1 GiB, 1 and 2 threads, beside glibc malloc/free;
// - RMM's random_allocations workload (allocate with probability 0.73, sizes uniform in
//   [1 B, max MiB], live total capped at 16,000 MiB): time and peak reserved / peak requested.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/range_segment_source.h"

#ifdef FERRY_HAVE_CUDA
#include "allocator/cuda_check.h"
#include "allocator/cuda_segment_sources.h"
#endif

namespace ferry {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// One allocator shared by the benchmark's threads, each on its own stream.
class SharedAllocator : public benchmark::Fixture {
 public:
  void SetUp(const benchmark::State& state) override {
    std::lock_guard lock(setup_mutex_);
    if (users_++ == 0) {
      source_ = std::make_unique<AddressSpaceSegmentSource>(std::size_t{64} << 30);
      allocator_ = std::make_unique<CachingAllocator>(*source_, events_);
    }
    (void)state;
  }
  void TearDown(const benchmark::State&) override {
    std::lock_guard lock(setup_mutex_);
    if (--users_ == 0) {
      allocator_.reset();
      source_.reset();
    }
  }

 protected:
  std::mutex setup_mutex_;
  int users_ = 0;
  ImmediateEventSource events_;
  std::unique_ptr<AddressSpaceSegmentSource> source_;
  std::unique_ptr<CachingAllocator> allocator_;
};

BENCHMARK_DEFINE_F(SharedAllocator, CacheHitMallocFree)(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const auto stream = static_cast<StreamId>(state.thread_index());
  allocator_->free(allocator_->malloc(bytes, stream, MemoryCategory::activations));  // warm the cache
  for (auto _ : state) {
    Allocation allocation = allocator_->malloc(bytes, stream, MemoryCategory::activations);
    benchmark::DoNotOptimize(allocation.address);
    allocator_->free(allocation);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_REGISTER_F(SharedAllocator, CacheHitMallocFree)
    ->RangeMultiplier(8)
    ->Range(512, std::int64_t{1} << 30)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void GlibcMallocFree(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* pointer = std::malloc(bytes);
    benchmark::DoNotOptimize(pointer);
    std::free(pointer);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(GlibcMallocFree)->RangeMultiplier(8)->Range(512, std::int64_t{1} << 30)->Threads(1)->Threads(2)->UseRealTime();

// RMM's random_allocations: range(0) = allocations, range(1) = max size in MiB, range(2) = 1 for
// expandable segments.
void RandomAllocations(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto max_bytes = static_cast<std::size_t>(state.range(1)) * kMiB;
  constexpr std::size_t kTotalCap = std::size_t{16000} * kMiB;
  AllocatorConfig config;
  config.expandable_segments = state.range(2) != 0;
  double reserved_over_requested = 0;
  for (auto _ : state) {
    AddressSpaceSegmentSource source(std::size_t{32} << 30);
    ImmediateEventSource events;
    CachingAllocator allocator(source, events, config);
    std::mt19937_64 random(42);
    std::uniform_int_distribution<std::size_t> size_distribution(1, max_bytes);
    std::bernoulli_distribution allocate(0.73);
    std::vector<std::pair<Allocation, std::size_t>> live;
    std::size_t live_bytes = 0;
    std::size_t peak_requested = 0;
    std::size_t done = 0;
    while (done < count) {
      const std::size_t bytes = size_distribution(random);
      if ((allocate(random) || live.empty()) && live_bytes + bytes <= kTotalCap) {
        live.emplace_back(allocator.malloc(bytes, 0, MemoryCategory::uncategorized), bytes);
        live_bytes += bytes;
        peak_requested = std::max(peak_requested, live_bytes);
        ++done;
      } else if (!live.empty()) {
        const std::size_t index = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(random);
        allocator.free(live[index].first);
        live_bytes -= live[index].second;
        live[index] = live.back();
        live.pop_back();
      }
    }
    for (auto& [allocation, bytes] : live) allocator.free(allocation);
    reserved_over_requested = static_cast<double>(allocator.statistics().reserved_bytes.all().peak) /
                              static_cast<double>(peak_requested);
  }
  state.counters["reserved_over_requested"] = reserved_over_requested;
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(count));
}
BENCHMARK(RandomAllocations)
    ->ArgsProduct({{1000, 10000, 100000}, {1, 4, 64, 256, 1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

#ifdef FERRY_HAVE_CUDA
// On a GPU: the caching allocator over cudaMalloc beside cudaMalloc/cudaFree and the stream-ordered
// cudaMallocAsync/cudaFreeAsync, same sizes, one thread.
void CudaCachingHit(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  CudaMallocSegmentSource source(0);
  ImmediateEventSource events;
  CachingAllocator allocator(source, events);
  allocator.free(allocator.malloc(bytes, 0, MemoryCategory::activations));
  for (auto _ : state) {
    Allocation allocation = allocator.malloc(bytes, 0, MemoryCategory::activations);
    benchmark::DoNotOptimize(allocation.address);
    allocator.free(allocation);
  }
}

void CudaMallocFree(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* pointer = nullptr;
    FERRY_CUDA_CHECK(cudaMalloc(&pointer, bytes));
    FERRY_CUDA_CHECK(cudaFree(pointer));
  }
}

void CudaMallocAsyncFree(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  cudaStream_t stream = nullptr;
  FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaMemPool_t pool = nullptr;
  FERRY_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  std::uint64_t keep_everything = UINT64_MAX;  // as PyTorch configures it: no release at sync
  FERRY_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
  for (auto _ : state) {
    void* pointer = nullptr;
    FERRY_CUDA_CHECK(cudaMallocAsync(&pointer, bytes, stream));
    FERRY_CUDA_CHECK(cudaFreeAsync(pointer, stream));
  }
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream));
  FERRY_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Registered only where a GPU is present, so the program runs everywhere.
const bool kCudaBenchmarksRegistered = [] {
  if (!cuda_device_available()) return false;
  for (auto* benchmark : {benchmark::RegisterBenchmark("CudaCachingHit", CudaCachingHit),
                          benchmark::RegisterBenchmark("CudaMallocFree", CudaMallocFree),
                          benchmark::RegisterBenchmark("CudaMallocAsyncFree", CudaMallocAsyncFree)}) {
    benchmark->RangeMultiplier(8)->Range(512, std::int64_t{1} << 30)->UseRealTime();
  }
  return true;
}();
#endif

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
