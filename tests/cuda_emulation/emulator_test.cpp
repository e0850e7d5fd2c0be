// The emulator itself (cuda_emulation/device_functions.h, grid_launch.h): barriers, threads that return
// early, shared memory per block, warp shuffles and votes, and the failures it must report: results that
// depend on the schedule order, deadlocks, exchanges with lanes that have exited, refused configurations;
// and work a stream defers (the emulated NCCL's), which holds back its events and its later work.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "allocator/cuda_check.h"
#include "cuda_emulation/stream_work.h"
#include "models/kernels/cuda/kernel_launch.h"

namespace ferry {
namespace {

// Device memory holding `values`, freed at scope exit.
template <typename Value>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<Value>& values) : count_(values.size()) {
    FERRY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
    FERRY_CUDA_CHECK(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Value* data() const { return data_; }
  std::vector<Value> download() const {
    std::vector<Value> values(count_);
    FERRY_CUDA_CHECK(cudaMemcpy(values.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return values;
  }

 private:
  std::size_t bytes() const { return count_ * sizeof(Value); }
  std::size_t count_;
  Value* data_ = nullptr;
};

// Block sums through shared memory, with threads past `count` returning before the barrier.
__global__ void block_sum_kernel(float* sums, const float* values, int count) {
  FERRY_SHARED(float, partial, [64]);
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  partial[threadIdx.x] = i < count ? values[i] : 0.0f;
  __syncthreads();
  if (threadIdx.x >= 32) return;  // exited threads count as arrived at the barrier below
  partial[threadIdx.x] += partial[threadIdx.x + 32];
  __syncthreads();
  if (threadIdx.x != 0) return;
  float sum = 0;
  for (int lane = 0; lane < 32; ++lane) sum += partial[lane];
  sums[blockIdx.x] = sum;
}

TEST(CudaEmulation, BarriersSharedMemoryAndEarlyReturnsGiveExactBlockSums) {
  const int count = 150;  // a partial third block
  std::vector<float> values(static_cast<std::size_t>(count));
  std::iota(values.begin(), values.end(), 1.0f);
  const DeviceBuffer<float> input(values), sums(std::vector<float>(3, -1.0f));
  FERRY_LAUNCH_KERNEL(block_sum_kernel, 3, 64, 0, nullptr, sums.data(), input.data(), count);
  EXPECT_EQ(sums.download(), (std::vector<float>{2080.0f, 6176.0f, 3069.0f}));  // 1..64, 65..128, 129..150
}

// Every lane's value after each shuffle and vote, 8 per lane.
__global__ void warp_functions_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  int* mine = out + threadIdx.x * 8;
  mine[0] = __shfl_xor_sync(0xffffffffu, lane, 1);
  mine[1] = __shfl_down_sync(0xffffffffu, lane, 4);
  mine[2] = __shfl_up_sync(0xffffffffu, lane, 4);
  mine[3] = __shfl_sync(0xffffffffu, lane * 10 + warp, 7);
  mine[4] = __shfl_xor_sync(0xffffffffu, lane, 2, 4);  // within groups of 4
  mine[5] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  mine[6] = __all_sync(0xffffffffu, lane < 32);
  mine[7] = __any_sync(0xffffffffu, lane == 31 && warp == 1);
}

TEST(CudaEmulation, WarpShufflesAndVotesExchangeAmongTheWarpsLanes) {
  const DeviceBuffer<int> out(std::vector<int>(64 * 8, -1));
  FERRY_LAUNCH_KERNEL(warp_functions_kernel, 1, 64, 0, nullptr, out.data());
  const std::vector<int> values = out.download();
  unsigned int every_third = 0;
  for (int lane = 0; lane < 32; lane += 3) every_third |= 1u << lane;
  for (int thread = 0; thread < 64; ++thread) {
    const int lane = thread % 32, warp = thread / 32;
    const int* got = &values[static_cast<std::size_t>(thread) * 8];
    EXPECT_EQ(got[0], lane ^ 1) << thread;
    EXPECT_EQ(got[1], lane + 4 < 32 ? lane + 4 : lane) << thread;
    EXPECT_EQ(got[2], lane >= 4 ? lane - 4 : lane) << thread;
    EXPECT_EQ(got[3], 70 + warp) << thread;
    EXPECT_EQ(got[4], lane ^ 2) << thread;
    EXPECT_EQ(static_cast<unsigned int>(got[5]), every_third) << thread;
    EXPECT_EQ(got[6], 1) << thread;
    EXPECT_EQ(got[7], warp == 1 ? 1 : 0) << thread;
  }
}

// The partial sums are read before every thread has written them: no barrier.
__global__ void racy_sum_kernel(float* sums, const float* values) {
  FERRY_SHARED(float, partial, [64]);
  partial[threadIdx.x] = values[blockIdx.x * blockDim.x + threadIdx.x];
  if (threadIdx.x != 0) return;
  float sum = 0;
  for (int i = 0; i < 64; ++i) sum += partial[i];
  sums[blockIdx.x] = sum;
}

TEST(CudaEmulation, AMissingBarrierMakesResultsDependOnTheScheduleOrder) {
  // A race shows only between two orders; a run narrowed to one (FERRY_CUDA_EMULATION_ORDERS=forward, as
  // the multi-rank runs are for speed) cannot see it.
  const char* orders = std::getenv("FERRY_CUDA_EMULATION_ORDERS");
  if (orders != nullptr && std::string(orders).find(',') == std::string::npos) {
    GTEST_SKIP() << "FERRY_CUDA_EMULATION_ORDERS=" << orders << " names one schedule order: no second order to compare";
  }
  const DeviceBuffer<float> input(std::vector<float>(128, 1.0f)), sums(std::vector<float>(2, 0.0f));
  try {
    FERRY_LAUNCH_KERNEL(racy_sum_kernel, 2, 64, 0, nullptr, sums.data(), input.data());
    FAIL() << "a kernel racing on shared memory ran without an error";
  } catch (const cuda_emulation::EmulationError& error) {
    EXPECT_NE(std::string(error.what()).find("racy_sum_kernel"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("results differ between the forward and"), std::string::npos) << error.what();
  }
}

// Half the block waits at __syncthreads while the other half waits at a shuffle for lanes that never come.
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  }
}

TEST(CudaEmulation, ADeadlockIsReportedNotHung) {
  const DeviceBuffer<int> out(std::vector<int>(32, 0));
  try {
    FERRY_LAUNCH_KERNEL(divergent_barrier_kernel, 1, 32, 0, nullptr, out.data());
    FAIL() << "a deadlocked block ran without an error";
  } catch (const cuda_emulation::EmulationError& error) {
    EXPECT_NE(std::string(error.what()).find("deadlock: 16 threads wait at __syncthreads, 16 at a warp exchange"), std::string::npos)
        << error.what();
  }
}

__global__ void shuffle_after_exit_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmulation, AShuffleNamingAnExitedLaneFails) {
  const DeviceBuffer<int> out(std::vector<int>(32, 0));
  EXPECT_THROW(FERRY_LAUNCH_KERNEL(shuffle_after_exit_kernel, 1, 32, 0, nullptr, out.data()), cuda_emulation::EmulationError);
}

__global__ void dynamic_shared_kernel(float* out) {
  FERRY_DYNAMIC_SHARED(float, scratch);
  scratch[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = scratch[blockDim.x - 1 - threadIdx.x];
}

TEST(CudaEmulation, DynamicSharedMemoryHasTheLaunchsSize) {
  const DeviceBuffer<float> out(std::vector<float>(48, 0.0f));
  FERRY_LAUNCH_KERNEL(dynamic_shared_kernel, 1, 48, 48 * sizeof(float), nullptr, out.data());
  const std::vector<float> values = out.download();
  for (int i = 0; i < 48; ++i) EXPECT_EQ(values[static_cast<std::size_t>(i)], static_cast<float>(47 - i));
}

TEST(CudaEmulation, ConfigurationsTheRuntimeRefusesFailAtTheLaunch) {
  const DeviceBuffer<float> out(std::vector<float>(1, 0.0f));
  EXPECT_THROW(FERRY_LAUNCH_KERNEL(dynamic_shared_kernel, 1, 2048, 0, nullptr, out.data()), CudaError);    // > 1024 threads
  EXPECT_THROW(FERRY_LAUNCH_KERNEL(dynamic_shared_kernel, 0, 32, 0, nullptr, out.data()), CudaError);      // no blocks
  EXPECT_THROW(FERRY_LAUNCH_KERNEL(dynamic_shared_kernel, 1, 32, 64 << 10, nullptr, out.data()), CudaError);  // > 48 KiB shared
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the check took the error
}

TEST(CudaEmulation, CopiesOutsideDeviceMemoryAreRefused) {
  const DeviceBuffer<float> buffer(std::vector<float>(4, 0.0f));
  std::vector<float> host(8);
  EXPECT_EQ(cudaMemcpy(host.data(), buffer.data(), 8 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(buffer.data(), host.data(), 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), buffer.data(), 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
}

TEST(CudaEmulation, EventsTimeWhatRanBetweenTheirRecords) {
  cudaEvent_t start = nullptr, end = nullptr, untimed = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  float milliseconds = -1.0f;
  EXPECT_EQ(cudaEventElapsedTime(&milliseconds, start, end), cudaErrorInvalidResourceHandle) << "not recorded yet";
  ASSERT_EQ(cudaEventRecord(start), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the work between the records, run when issued
  ASSERT_EQ(cudaEventRecord(end), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&milliseconds, start, end), cudaSuccess);
  EXPECT_GE(milliseconds, 20.0f);
  EXPECT_LT(milliseconds, 20000.0f);
  EXPECT_EQ(cudaEventElapsedTime(&milliseconds, start, untimed), cudaErrorInvalidResourceHandle) << "made without timing";
  cudaGetLastError();
  for (cudaEvent_t event : {start, end, untimed}) EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

// Deferred work (stream_work.h) that completes once `arrived`, or when waited for.
struct DeferredArrival {
  bool arrived = false;
  int completed = 0;
  cuda_emulation::DeferredWork work() {
    return [this](bool wait) {
      if (!arrived && !wait) return false;
      ++completed;
      return true;
    };
  }
};

TEST(CudaEmulation, DeferredWorkHoldsBackItsStreamsEventsAndLaterWork) {
  cudaStream_t stream = nullptr, waiting = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&waiting, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t before = nullptr, after = nullptr;
  ASSERT_EQ(cudaEventCreate(&before), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&after), cudaSuccess);
  DeferredArrival first, second;

  ASSERT_EQ(cudaEventRecord(before, stream), cudaSuccess);
  cuda_emulation::defer_on_stream(stream, first.work());
  ASSERT_EQ(cudaEventRecord(after, stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(before), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(after), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  float milliseconds = 0;
  EXPECT_EQ(cudaEventElapsedTime(&milliseconds, before, after), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  // A stream told to wait for the event waits with it; the legacy stream's copies do not wait for a
  // non-blocking stream.
  ASSERT_EQ(cudaStreamWaitEvent(waiting, after, 0), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(waiting), cudaErrorNotReady);
  DeviceBuffer<float> buffer(std::vector<float>{1.0f});
  ASSERT_EQ(cudaMemset(buffer.data(), 0, sizeof(float)), cudaSuccess);
  EXPECT_EQ(first.completed, 0);

  first.arrived = true;
  EXPECT_EQ(cudaEventQuery(after), cudaSuccess);
  EXPECT_EQ(first.completed, 1);
  EXPECT_EQ(cudaStreamQuery(waiting), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&milliseconds, before, after), cudaSuccess);

  // Work issued to the stream later runs after what it deferred, waiting for it.
  cuda_emulation::defer_on_stream(stream, second.work());
  ASSERT_EQ(cudaMemsetAsync(buffer.data(), 0, sizeof(float), stream), cudaSuccess);
  EXPECT_EQ(second.completed, 1);

  for (cudaEvent_t event : {before, after}) EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  for (cudaStream_t each : {stream, waiting}) EXPECT_EQ(cudaStreamDestroy(each), cudaSuccess);
}

}  // namespace
}  // namespace ferry
