// The device side of the CUDA execution model for kernels compiled as host C++: threadIdx, blockIdx,
// blockDim and gridDim, __syncthreads, warp shuffles and votes (exchanges among a warp's lanes at a
// warp barrier), atomics on std::atomic_ref, and CUDA's math intrinsics mapped to host functions.
#pragma once

#include <math.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_emulation/runtime_api.h"

namespace ferry::cuda_emulation {

// Where the running emulated thread is: its thread and block indices and the launch's sizes.
struct ThreadPosition {
  uint3 thread_index;
  uint3 block_index;
  uint3 block_dim;
  uint3 grid_dim;
};

// Each is valid only inside a kernel run by the emulator (block_run.cpp); outside one they abort.
const ThreadPosition& current_position();
void sync_threads();
int lane_id();
// Deposits `value` for this lane, waits until every lane in `mask` has deposited at the same exchange,
// and returns the warp's 32 deposits (entries of lanes outside `mask` are not to be read).
const std::uint64_t* warp_exchange(unsigned int mask, std::uint64_t value);
// Fails the launch (reported by the launch, with `what`) when lane `source` is outside `mask`.
void require_lane_in_mask(unsigned int mask, int source, const char* what);
// This block's instance of the __shared__ variable declared at `site`: a heap allocation of exactly
// `bytes`, filled with 0xff bytes (NaN floats) when the block starts using it.
void* shared_variable(const void* site, std::size_t bytes);
// The launch's dynamic shared memory (extern __shared__): exactly the bytes the launch asked for.
void* dynamic_shared_memory();

template <typename Value>
Value shuffle(unsigned int mask, Value value, int source, const char* what) {
  static_assert(sizeof(Value) <= sizeof(std::uint64_t) && std::is_trivially_copyable_v<Value>, "warp shuffles move up to 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(Value));
  const std::uint64_t* deposits = warp_exchange(mask, bits);
  require_lane_in_mask(mask, source, what);
  Value result;
  std::memcpy(&result, &deposits[source], sizeof(Value));
  return result;
}

// The block's instance of one __shared__ declaration; Site (a lambda's type) makes each declaration
// in each template instantiation distinct.
template <typename Variable, typename Site>
Variable& block_shared(Site) {
  static const char site = 0;
  return *static_cast<Variable*>(shared_variable(&site, sizeof(Variable)));
}

}  // namespace ferry::cuda_emulation

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

// Shared memory is declared through FERRY_SHARED / FERRY_DYNAMIC_SHARED (models/kernels/cuda/kernel_launch.h),
// which give each emulated block its own exactly-sized heap allocation; a bare __shared__ does not compile.
#define __shared__ static_assert(false, "declare shared memory with FERRY_SHARED (models/kernels/cuda/kernel_launch.h)");

#define threadIdx (::ferry::cuda_emulation::current_position().thread_index)
#define blockIdx (::ferry::cuda_emulation::current_position().block_index)
#define blockDim (::ferry::cuda_emulation::current_position().block_dim)
#define gridDim (::ferry::cuda_emulation::current_position().grid_dim)
inline constexpr int warpSize = 32;

inline void __syncthreads() { ::ferry::cuda_emulation::sync_threads(); }
inline void __syncwarp(unsigned int mask = 0xffffffffu) { ::ferry::cuda_emulation::warp_exchange(mask, 0); }

// ---- warp shuffles: lane sources as the CUDA programming guide defines them within `width` lanes ----

template <typename Value>
Value __shfl_sync(unsigned int mask, Value value, int source_lane, int width = warpSize) {
  const int lane = ::ferry::cuda_emulation::lane_id();
  return ::ferry::cuda_emulation::shuffle(mask, value, lane / width * width + source_lane % width, "__shfl_sync");
}
template <typename Value>
Value __shfl_xor_sync(unsigned int mask, Value value, int lane_mask, int width = warpSize) {
  const int lane = ::ferry::cuda_emulation::lane_id();
  const int source = lane ^ lane_mask;
  return ::ferry::cuda_emulation::shuffle(mask, value, source / width == lane / width ? source : lane, "__shfl_xor_sync");
}
template <typename Value>
Value __shfl_down_sync(unsigned int mask, Value value, unsigned int delta, int width = warpSize) {
  const int lane = ::ferry::cuda_emulation::lane_id();
  const int source = lane % width + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
  return ::ferry::cuda_emulation::shuffle(mask, value, source, "__shfl_down_sync");
}
template <typename Value>
Value __shfl_up_sync(unsigned int mask, Value value, unsigned int delta, int width = warpSize) {
  const int lane = ::ferry::cuda_emulation::lane_id();
  const int source = lane % width >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
  return ::ferry::cuda_emulation::shuffle(mask, value, source, "__shfl_up_sync");
}

// ---- votes ---------------------------------------------------------------------------------------

inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
  const std::uint64_t* deposits = ::ferry::cuda_emulation::warp_exchange(mask, predicate != 0 ? 1u : 0u);
  unsigned int ballot = 0;
  for (int lane = 0; lane < warpSize; ++lane) {
    if ((mask >> lane & 1u) != 0 && deposits[lane] != 0) ballot |= 1u << lane;
  }
  return ballot;
}
inline int __all_sync(unsigned int mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }
inline int __any_sync(unsigned int mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }

// ---- atomics: the emulated threads of a block are fibers on one OS thread, and blocks run one after
// another, but std::atomic_ref keeps them atomic should a launch ever be spread over threads ----------

#define FERRY_EMULATED_ATOMIC(Type)                                                                     \
  inline Type atomicAdd(Type* address, Type value) { return std::atomic_ref<Type>(*address).fetch_add(value); } \
  inline Type atomicExch(Type* address, Type value) { return std::atomic_ref<Type>(*address).exchange(value); }
FERRY_EMULATED_ATOMIC(int)
FERRY_EMULATED_ATOMIC(unsigned int)
FERRY_EMULATED_ATOMIC(unsigned long long)
FERRY_EMULATED_ATOMIC(float)
FERRY_EMULATED_ATOMIC(double)
#undef FERRY_EMULATED_ATOMIC

template <typename Integer>
Integer atomicCAS(Integer* address, Integer expected, Integer desired) {
  std::atomic_ref<Integer>(*address).compare_exchange_strong(expected, desired);
  return expected;  // the old value, whether or not it was replaced
}
template <typename Integer>
Integer atomicMax(Integer* address, Integer value) {
  std::atomic_ref<Integer> target(*address);
  Integer old = target.load();
  while (old < value && !target.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <typename Integer>
Integer atomicMin(Integer* address, Integer value) {
  std::atomic_ref<Integer> target(*address);
  Integer old = target.load();
  while (value < old && !target.compare_exchange_weak(old, value)) {
  }
  return old;
}

// ---- bit casts and math intrinsics ----------------------------------------------------------------
// expf, logf, sqrtf, tanhf, fmaxf, exp, log... are the host's <cmath>. Where CUDA's documented error
// bounds (CUDA C++ Programming Guide, "Mathematical Functions") differ from glibc's, the emulation
// computes a (usually more exact) host value, so results can differ from a GPU's in the last bits:
//   expf, tanhf: CUDA 2 ULP, glibc < 1 ULP;   logf: CUDA 1 ULP;   sqrtf: correctly rounded on both.
//   __expf: CUDA 2 + floor(|1.173 x|) ULP, here expf;   __logf: CUDA 2^-21.41 absolute, here logf.
//   rsqrtf: CUDA 2 ULP, here 1 / sqrtf (two roundings);  __fdividef: CUDA 2 ULP, here a / b.
// nvcc also contracts a * b + c into fused multiply-adds (unless --fmad=false); the host build does
// not. What the emulation checks bit for bit is each kernel against itself across schedule orders.

inline unsigned int __float_as_uint(float value) { return std::bit_cast<unsigned int>(value); }
inline float __uint_as_float(unsigned int bits) { return std::bit_cast<float>(bits); }
inline int __float_as_int(float value) { return std::bit_cast<int>(value); }
inline float __int_as_float(int bits) { return std::bit_cast<float>(bits); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
