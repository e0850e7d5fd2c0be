// One warp's 16x8x8 matrix product on the tensor cores in TF32 (PTX mma.sync m16n8k8), with the fragment
// layouts of the PTX ISA, for kernels that keep f32 in memory and multiply in TF32 as cuBLASLt's
// CUBLAS_COMPUTE_32F_FAST_TF32 does. Under the CUDA emulation the same product runs by warp shuffles.
#pragma once

#include <cstdint>

namespace ferry::cuda {

// Lane l's place in a fragment: group g = l / 4 (a row of A and C, a column of B), t = l % 4.
// A (16 x 8, row-major): x[0] (g, t), x[1] (g + 8, t), x[2] (g, t + 4), x[3] (g + 8, t + 4).
// B (8 x 8, k by n): x[0] (k = t, n = g), x[1] (k = t + 4, n = g).
// C (16 x 8): x[0] (g, 2t), x[1] (g, 2t + 1), x[2] (g + 8, 2t), x[3] (g + 8, 2t + 1).
// A and B values are expected already rounded by round_to_tf32.
struct FragmentA {
  float x[4];
};
struct FragmentB {
  float x[2];
};
struct FragmentC {
  float x[4];
};

#if defined(FERRY_CUDA_EMULATION)
// Under emulation a warp-wide product moves whole fragments in one warp exchange per pair of floats (a
// shuffle per value made the emulated kernels ten times slower).
namespace emulated_warp {
struct Pairs {
  float first[32];
  float second[32];
};
inline Pairs exchange_pair(float first, float second) {
  const std::uint64_t* deposits = ::ferry::cuda_emulation::warp_exchange(
      0xffffffffu, static_cast<std::uint64_t>(__float_as_uint(first)) | static_cast<std::uint64_t>(__float_as_uint(second)) << 32);
  Pairs pairs;
  for (int lane = 0; lane < 32; ++lane) {
    pairs.first[lane] = __uint_as_float(static_cast<unsigned int>(deposits[lane]));
    pairs.second[lane] = __uint_as_float(static_cast<unsigned int>(deposits[lane] >> 32));
  }
  return pairs;
}
}  // namespace emulated_warp
#endif

// value rounded to TF32 (10 mantissa bits), to nearest with ties away from zero (cvt.rna.tf32.f32).
__device__ inline float round_to_tf32(float value) {
#if defined(FERRY_CUDA_EMULATION)
  const unsigned int bits = __float_as_uint(value);
  if ((bits & 0x7f800000u) == 0x7f800000u) return value;  // infinities and NaNs pass
  return __uint_as_float((bits + 0x1000u) & 0xffffe000u);
#elif defined(__CUDA_ARCH__)
  std::uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(value));
  return __uint_as_float(bits);
#else
  return value;  // nvcc's host pass of a device function: never run
#endif
}

// c += a * b over the warp. Every lane of the warp must call it together.
__device__ inline void mma_tf32(FragmentC& c, const FragmentA& a, const FragmentB& b) {
#if defined(FERRY_CUDA_EMULATION)
  // Three exchanges of the warp's fragments (A's two halves, B), then each lane sums its four results, k in order.
  const emulated_warp::Pairs a_low = emulated_warp::exchange_pair(a.x[0], a.x[1]);
  const emulated_warp::Pairs a_high = emulated_warp::exchange_pair(a.x[2], a.x[3]);
  const emulated_warp::Pairs b_pairs = emulated_warp::exchange_pair(b.x[0], b.x[1]);
  const int lane = static_cast<int>(threadIdx.x) % 32, group = lane / 4, thread = lane % 4;
  for (int k = 0; k < 8; ++k) {
    const emulated_warp::Pairs& a_pairs = k < 4 ? a_low : a_high;
    const int a_source = group * 4 + k % 4, which = k / 4;
    const float a_row = a_pairs.first[a_source], a_row_8 = a_pairs.second[a_source];
    const float b_even = which == 0 ? b_pairs.first[2 * thread * 4 + k % 4] : b_pairs.second[2 * thread * 4 + k % 4];
    const float b_odd = which == 0 ? b_pairs.first[(2 * thread + 1) * 4 + k % 4] : b_pairs.second[(2 * thread + 1) * 4 + k % 4];
    c.x[0] += a_row * b_even;
    c.x[1] += a_row * b_odd;
    c.x[2] += a_row_8 * b_even;
    c.x[3] += a_row_8 * b_odd;
  }
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3])
      : "r"(__float_as_uint(a.x[0])), "r"(__float_as_uint(a.x[1])), "r"(__float_as_uint(a.x[2])), "r"(__float_as_uint(a.x[3])),
        "r"(__float_as_uint(b.x[0])), "r"(__float_as_uint(b.x[1])));
#else
  (void)c, (void)a, (void)b;  // nvcc's host pass of a device function: never run
#endif
}

// The A fragment of columns [8j, 8j + 8) of a 16 x (8 n) product held as n C fragments (c[j] among them),
// rounded to TF32: a product's result fed on as the left operand of the next, without shared memory.
__device__ inline FragmentA c_to_a_fragment(const FragmentC& c) {
  const int lane = static_cast<int>(threadIdx.x) % 32, group = lane / 4, thread = lane % 4;
  // Column t of the 8 is held by lane (g, t / 2) as x[t % 2]; column t + 4 by lane (g, 2 + t / 2).
  const int low_source = group * 4 + thread / 2, high_source = low_source + 2;
  const bool odd = (thread & 1) != 0;
  FragmentA a;
#if defined(FERRY_CUDA_EMULATION)
  const emulated_warp::Pairs row = emulated_warp::exchange_pair(c.x[0], c.x[1]);
  const emulated_warp::Pairs row_8 = emulated_warp::exchange_pair(c.x[2], c.x[3]);
  const float low_even = row.first[low_source], low_odd = row.second[low_source];
  const float low_even_8 = row_8.first[low_source], low_odd_8 = row_8.second[low_source];
  const float high_even = row.first[high_source], high_odd = row.second[high_source];
  const float high_even_8 = row_8.first[high_source], high_odd_8 = row_8.second[high_source];
#else
  const float low_even = __shfl_sync(0xffffffffu, c.x[0], low_source), low_odd = __shfl_sync(0xffffffffu, c.x[1], low_source);
  const float low_even_8 = __shfl_sync(0xffffffffu, c.x[2], low_source), low_odd_8 = __shfl_sync(0xffffffffu, c.x[3], low_source);
  const float high_even = __shfl_sync(0xffffffffu, c.x[0], high_source), high_odd = __shfl_sync(0xffffffffu, c.x[1], high_source);
  const float high_even_8 = __shfl_sync(0xffffffffu, c.x[2], high_source), high_odd_8 = __shfl_sync(0xffffffffu, c.x[3], high_source);
#endif
  a.x[0] = round_to_tf32(odd ? low_odd : low_even);
  a.x[1] = round_to_tf32(odd ? low_odd_8 : low_even_8);
  a.x[2] = round_to_tf32(odd ? high_odd : high_even);
  a.x[3] = round_to_tf32(odd ? high_odd_8 : high_even_8);
  return a;
}

}  // namespace ferry::cuda
