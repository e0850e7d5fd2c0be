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

__device__ std::uint16_t to_bf16_bits(float value) { return float_to_bf16_bits(value); }
__device__ float from_bf16_bits(std::uint16_t bits) { return __uint_as_float(static_cast<std::uint32_t>(bits) << 16); }
__device__ std::uint16_t to_f16_bits(float value) { return __half_as_ushort(__float2half_rn(value)); }
__device__ float from_f16_bits(std::uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// Four elements as one 8- or 16-byte access.
template <typename Element>
struct alignas(4 * sizeof(Element)) FourElements {
  Element value[4];
};

// destination[i] = Convert(source[i]): `groups` groups of four by vector loads and stores (the launch gives
// groups = 0 where the pointers are not aligned to them), the rest one by one. Conversions are bandwidth-bound
// and a warp's 2-byte accesses left much of it unused.
template <typename Source, typename Destination, Destination (*Convert)(Source)>
__global__ void convert_kernel(const Source* source, Destination* destination, std::int64_t count, std::int64_t groups) {
  FERRY_FOR_EACH_INDEX(group, groups) {
    const FourElements<Source> in = reinterpret_cast<const FourElements<Source>*>(source)[group];
    FourElements<Destination> out;
#pragma unroll
    for (int i = 0; i < 4; ++i) out.value[i] = Convert(in.value[i]);
    reinterpret_cast<FourElements<Destination>*>(destination)[group] = out;
  }
  FERRY_FOR_EACH_INDEX(i, count - 4 * groups) destination[4 * groups + i] = Convert(source[4 * groups + i]);
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

template <typename Source, typename Destination, Destination (*Convert)(Source)>
void launch_convert(const Source* source, Destination* destination, std::int64_t count, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<std::uintptr_t>(source) % sizeof(FourElements<Source>) == 0 &&
                       reinterpret_cast<std::uintptr_t>(destination) % sizeof(FourElements<Destination>) == 0;
  const std::int64_t groups = aligned ? count / 4 : 0;
  FERRY_LAUNCH_OVER((convert_kernel<Source, Destination, Convert>), aligned ? groups + count % 4 : count, stream, source, destination,
                    count, groups);
}

void convert_f32_to_bf16(const float* source, std::uint16_t* destination, std::int64_t count, cudaStream_t stream) {
  launch_convert<float, std::uint16_t, to_bf16_bits>(source, destination, count, stream);
}

void convert_bf16_to_f32(const std::uint16_t* source, float* destination, std::int64_t count, cudaStream_t stream) {
  launch_convert<std::uint16_t, float, from_bf16_bits>(source, destination, count, stream);
}

void convert_f32_to_f16(const float* source, std::uint16_t* destination, std::int64_t count, cudaStream_t stream) {
  launch_convert<float, std::uint16_t, to_f16_bits>(source, destination, count, stream);
}

void convert_f16_to_f32(const std::uint16_t* source, float* destination, std::int64_t count, cudaStream_t stream) {
  launch_convert<std::uint16_t, float, from_f16_bits>(source, destination, count, stream);
}

#undef FERRY_LAUNCH_OVER

}  // namespace ferry::cuda
