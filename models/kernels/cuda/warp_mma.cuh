// One warp's 16x8x16 matrix product on the tensor cores with bf16 operands and f32 sums (PTX mma.sync
// m16n8k16 .bf16), with the PTX ISA's fragment layouts, for the bf16 flash attention kernels. Two bf16 values
// travel in one 32-bit register; under the CUDA emulation the product runs by warp exchanges.
#pragma once

#include <cstdint>

namespace ferry::cuda {

// C (16 x 8, f32): lane (g, t) holds x[0] (g, 2t), x[1] (g, 2t + 1), x[2] (g + 8, 2t), x[3] (g + 8, 2t + 1).
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

// Lane l's place: g = l / 4, t = l % 4; a register holds two adjacent columns (A) or rows (B), the lower one
// in its low 16 bits.
// A (16 x 16, row-major): x[0] (g, 2t..2t+1), x[1] (g + 8, 2t..2t+1), x[2] (g, 2t+8..2t+9), x[3] (g + 8, 2t+8..2t+9).
// B (16 x 8, k by n): x[0] (k = 2t..2t+1, n = g), x[1] (k = 2t+8..2t+9, n = g).
struct Bf16FragmentA {
  std::uint32_t x[4];
};
struct Bf16FragmentB {
  std::uint32_t x[2];
};

// bf16 bits of value rounded to nearest, ties to even (cvt.rn.bf16), as the elementwise kernels round.
__device__ inline std::uint32_t bf16_bits(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x0040u;  // NaN stays a quiet NaN
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// low and high rounded to bf16 and packed, low in the low 16 bits.
__device__ inline std::uint32_t pack_bf16x2(float low, float high) {
#if defined(__CUDA_ARCH__) && !defined(FERRY_CUDA_EMULATION)
  std::uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(high), "f"(low));
  return packed;
#else
  return bf16_bits(low) | bf16_bits(high) << 16;
#endif
}

__device__ inline float bf16_low(std::uint32_t packed) { return __uint_as_float(packed << 16); }
__device__ inline float bf16_high(std::uint32_t packed) { return __uint_as_float(packed & 0xffff0000u); }

// c += a * b over the warp. Every lane of the warp must call it together.
__device__ inline void mma_bf16(FragmentC& c, const Bf16FragmentA& a, const Bf16FragmentB& b) {
#if defined(FERRY_CUDA_EMULATION)
  // Three exchanges of the warp's fragments, then each lane sums its four results over k in order.
  const emulated_warp::Pairs a_low = emulated_warp::exchange_pair(__uint_as_float(a.x[0]), __uint_as_float(a.x[1]));
  const emulated_warp::Pairs a_high = emulated_warp::exchange_pair(__uint_as_float(a.x[2]), __uint_as_float(a.x[3]));
  const emulated_warp::Pairs b_pairs = emulated_warp::exchange_pair(__uint_as_float(b.x[0]), __uint_as_float(b.x[1]));
  const int lane = static_cast<int>(threadIdx.x) % 32, group = lane / 4, thread = lane % 4;
  const auto element = [](float packed, int k) {
    const std::uint32_t bits = __float_as_uint(packed);
    return k % 2 == 0 ? bf16_low(bits) : bf16_high(bits);
  };
  for (int k = 0; k < 16; ++k) {
    const int holder = k % 8 / 2;  // the t of the lanes holding column (A) or row (B) k
    const emulated_warp::Pairs& a_pairs = k < 8 ? a_low : a_high;
    const float a_row = element(a_pairs.first[group * 4 + holder], k), a_row_8 = element(a_pairs.second[group * 4 + holder], k);
    const float* b_source = k < 8 ? b_pairs.first : b_pairs.second;
    const float b_even = element(b_source[(2 * thread) * 4 + holder], k), b_odd = element(b_source[(2 * thread + 1) * 4 + holder], k);
    c.x[0] += a_row * b_even;
    c.x[1] += a_row * b_odd;
    c.x[2] += a_row_8 * b_even;
    c.x[3] += a_row_8 * b_odd;
  }
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
#else
  (void)c, (void)a, (void)b;  // nvcc's host pass of a device function: never run
#endif
}

// Four 8 x 8 matrices of 32-bit words (pairs of bf16) from shared memory in one warp-wide read (ldmatrix.x4):
// lane l gives the address of row l % 8 of matrix l / 8 (four words, 16-byte aligned); words[i] is matrix
// i's word (row l / 4, column l % 4) for lane l, the place of an mma fragment's register.
__device__ inline void load_matrices_x4(std::uint32_t (&words)[4], const std::uint32_t* row) {
#if defined(FERRY_CUDA_EMULATION)
  const std::uint64_t* rows = ::ferry::cuda_emulation::warp_exchange(0xffffffffu, reinterpret_cast<std::uintptr_t>(row));
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int i = 0; i < 4; ++i) words[i] = reinterpret_cast<const std::uint32_t*>(rows[8 * i + lane / 4])[lane % 4];
#elif defined(__CUDA_ARCH__)
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(words[0]), "=r"(words[1]), "=r"(words[2]), "=r"(words[3])
               : "r"(address));
#else
  (void)words, (void)row;  // nvcc's host pass of a device function: never run
#endif
}

// 2^x, to the GPU's ex2.approx (2 ulp; results below 2^-126 flushed to zero): the softmax's exponentials.
__device__ inline float fast_exp2(float x) {
#if defined(__CUDA_ARCH__) && !defined(FERRY_CUDA_EMULATION)
  float result;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(result) : "f"(x));
  return result;
#else
  return exp2f(x);
#endif
}

// The A fragment of columns [16j, 16j + 16) of a 16 x (8 n) f32 product held as C fragments: left = c[2j],
// right = c[2j + 1], rounded to bf16. C's layout is A's: no exchange between lanes.
__device__ inline Bf16FragmentA c_pair_to_a_fragment(const FragmentC& left, const FragmentC& right) {
  return {{pack_bf16x2(left.x[0], left.x[1]), pack_bf16x2(left.x[2], left.x[3]), pack_bf16x2(right.x[0], right.x[1]),
           pack_bf16x2(right.x[2], right.x[3])}};
}

}  // namespace ferry::cuda
