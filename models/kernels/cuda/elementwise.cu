#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "models/kernels/cuda/elementwise.h"
#include "models/kernels/cuda/kernel_launch.h"

namespace ferry::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrtTwoOverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// Grid-stride loops: any count with a bounded grid.
#define FERRY_FOR_EACH_INDEX(i, count) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (count); i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

unsigned int grid_for(std::int64_t count) {
  constexpr std::int64_t kMaxBlocks = 65535;
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__global__ void residual_kernel(float* out, const float* a, const float* b, std::int64_t count) {
  FERRY_FOR_EACH_INDEX(i, count) out[i] = a[i] + b[i];
}

__global__ void dropout_forward_kernel(float* out, const float* inp, std::int64_t count, float probability, cpu::RandomKey key) {
  const float keep_scale = 1.0f / (1.0f - probability);
  FERRY_FOR_EACH_INDEX(i, count) {
    out[i] = probability > 0 ? (cpu::dropout_keeps(key, static_cast<std::uint64_t>(i), probability) ? inp[i] * keep_scale : 0.0f) : inp[i];
  }
}

__global__ void dropout_backward_kernel(float* dinp, const float* dout, std::int64_t count, float probability, cpu::RandomKey key) {
  const float keep_scale = 1.0f / (1.0f - probability);
  FERRY_FOR_EACH_INDEX(i, count) {
    dinp[i] += probability > 0 ? (cpu::dropout_keeps(key, static_cast<std::uint64_t>(i), probability) ? dout[i] * keep_scale : 0.0f)
                               : dout[i];
  }
}

__global__ void gelu_forward_kernel(float* out, const float* inp, std::int64_t count) {
  FERRY_FOR_EACH_INDEX(i, count) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kSqrtTwoOverPi * (x + kCubic * x * x * x)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, std::int64_t count) {
  FERRY_FOR_EACH_INDEX(i, count) {
    const float x = inp[i];
    const float tanh_out = tanhf(kSqrtTwoOverPi * (x + kCubic * x * x * x));
    const float sech_squared = 1.0f - tanh_out * tanh_out;
    const float local = 0.5f * (1.0f + tanh_out) + 0.5f * x * sech_squared * kSqrtTwoOverPi * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] += local * dout[i];
  }
}

// The host's rounding bit for bit (engine/core/dtype.cpp): NaN stays a quiet NaN with its high bits.
__device__ std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

__global__ void f32_to_bf16_kernel(const float* source, std::uint16_t* destination, std::int64_t count) {
  FERRY_FOR_EACH_INDEX(i, count) destination[i] = float_to_bf16_bits(source[i]);
}

__global__ void bf16_to_f32_kernel(const std::uint16_t* source, float* destination, std::int64_t count) {
  FERRY_FOR_EACH_INDEX(i, count) destination[i] = __uint_as_float(static_cast<std::uint32_t>(source[i]) << 16);
}

__global__ void f32_to_f16_kernel(const float* source, std::uint16_t* destination, std::int64_t count) {
  FERRY_FOR_EACH_INDEX(i, count) destination[i] = __half_as_ushort(__float2half_rn(source[i]));
}

__global__ void f16_to_f32_kernel(const std::uint16_t* source, float* destination, std::int64_t count) {
  FERRY_FOR_EACH_INDEX(i, count) destination[i] = __half2float(__ushort_as_half(source[i]));
}

#undef FERRY_FOR_EACH_INDEX

// One grid-stride launch over `count` elements (nothing for none), checked.
#define FERRY_LAUNCH_OVER(kernel, count, stream, ...) \
  if ((count) != 0) FERRY_LAUNCH_KERNEL(kernel, grid_for(count), kThreads, 0, stream, __VA_ARGS__)

}  // namespace

void residual_forward(float* out, const float* a, const float* b, std::int64_t count, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(residual_kernel, count, stream, out, a, b, count);
}

void dropout_forward(float* out, const float* inp, std::int64_t count, float probability, cpu::RandomKey key, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(dropout_forward_kernel, count, stream, out, inp, count, probability, key);
}

void dropout_backward(float* dinp, const float* dout, std::int64_t count, float probability, cpu::RandomKey key, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(dropout_backward_kernel, count, stream, dinp, dout, count, probability, key);
}

void gelu_forward(float* out, const float* inp, std::int64_t count, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(gelu_forward_kernel, count, stream, out, inp, count);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t count, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(gelu_backward_kernel, count, stream, dinp, inp, dout, count);
}

void convert_f32_to_bf16(const float* source, std::uint16_t* destination, std::int64_t count, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(f32_to_bf16_kernel, count, stream, source, destination, count);
}

void convert_bf16_to_f32(const std::uint16_t* source, float* destination, std::int64_t count, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(bf16_to_f32_kernel, count, stream, source, destination, count);
}

void convert_f32_to_f16(const float* source, std::uint16_t* destination, std::int64_t count, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(f32_to_f16_kernel, count, stream, source, destination, count);
}

void convert_f16_to_f32(const std::uint16_t* source, float* destination, std::int64_t count, cudaStream_t stream) {
  FERRY_LAUNCH_OVER(f16_to_f32_kernel, count, stream, source, destination, count);
}

#undef FERRY_LAUNCH_OVER

}  // namespace ferry::cuda
