#include <cmath>

#include "models/kernels/cuda/adamw.h"
#include "models/kernels/cuda/kernel_launch.h"
#include "models/kernels/cuda/warp_reduce.cuh"

namespace ferry::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned int kMaxBlocksPerTensor = 1024;
constexpr std::int64_t kSumBlockElements = std::int64_t{1} << 16;  // the CPU twin's block size

// A launch's tensors, passed by value as the kernel's parameter.
struct AdamWTensorList {
  AdamWTensor tensors[kAdamWTensorsPerLaunch];
};

struct AdamWScalars {
  float learning_rate_decay;  // 1 - lr * weight_decay
  float beta1, beta2;
  float step_size;            // lr / (1 - beta1^step)
  float bias_correction2_sqrt;
  float epsilon;
  float gradient_scale;
};

__device__ std::uint16_t round_to_bf16(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// blockIdx.y: the tensor; blocks of x stride over its elements. The arithmetic is the CPU twin's.
__global__ void adamw_kernel(AdamWTensorList list, AdamWScalars s) {
  const AdamWTensor& t = list.tensors[blockIdx.y];
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < t.count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = t.gradient[i] * s.gradient_scale;
    float p = t.parameter[i] * s.learning_rate_decay;
    const float m = t.first_moment[i] * s.beta1 + (1.0f - s.beta1) * g;
    const float v = t.second_moment[i] * s.beta2 + (1.0f - s.beta2) * g * g;
    const float denominator = sqrtf(v) / s.bias_correction2_sqrt + s.epsilon;
    p += -s.step_size * (m / denominator);
    t.first_moment[i] = m;
    t.second_moment[i] = v;
    t.parameter[i] = p;
    if (t.parameter_bf16 != nullptr) t.parameter_bf16[i] = round_to_bf16(p);
  }
}

// partials[block] = sum of squares of the block's kSumBlockElements values (f64).
__global__ void block_sum_of_squares_kernel(double* partials, const float* values, std::int64_t count) {
  FERRY_SHARED(double, warp_sums, [kThreads / kWarpSize]);
  const std::int64_t first = blockIdx.x * kSumBlockElements;
  const std::int64_t last = first + kSumBlockElements < count ? first + kSumBlockElements : count;
  double sum = 0;
  for (std::int64_t i = first + threadIdx.x; i < last; i += kThreads) sum += static_cast<double>(values[i]) * values[i];
  sum = warp_sum(sum);
  if (threadIdx.x % kWarpSize == 0) warp_sums[threadIdx.x / kWarpSize] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double block = 0;
  for (int warp = 0; warp < kThreads / kWarpSize; ++warp) block += warp_sums[warp];
  partials[blockIdx.x] = block;
}

__global__ void add_partials_kernel(double* result, bool accumulate, const double* partials, std::int64_t blocks) {
  double total = 0;
  for (std::int64_t block = 0; block < blocks; ++block) total += partials[block];
  *result = accumulate ? *result + total : total;
}

}  // namespace

void adamw_update(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& h, std::int64_t step, float gradient_scale,
                  cudaStream_t stream) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(step));
  const AdamWScalars scalars{1.0f - h.learning_rate * h.weight_decay,
                             h.beta1,
                             h.beta2,
                             static_cast<float>(static_cast<double>(h.learning_rate) / bias_correction1),
                             static_cast<float>(std::sqrt(bias_correction2)),
                             h.epsilon,
                             gradient_scale};
  for (std::size_t first = 0; first < tensors.size(); first += kAdamWTensorsPerLaunch) {
    const std::size_t count = tensors.size() - first < kAdamWTensorsPerLaunch ? tensors.size() - first : kAdamWTensorsPerLaunch;
    AdamWTensorList list{};
    std::int64_t largest = 0;
    for (std::size_t i = 0; i < count; ++i) {
      list.tensors[i] = tensors[first + i];
      largest = list.tensors[i].count > largest ? list.tensors[i].count : largest;
    }
    if (largest == 0) continue;
    const unsigned int blocks = blocks_for(largest, kThreads) < kMaxBlocksPerTensor ? blocks_for(largest, kThreads) : kMaxBlocksPerTensor;
    FERRY_LAUNCH_KERNEL(adamw_kernel, dim3(blocks, static_cast<unsigned int>(count)), kThreads, 0, stream, list, scalars);
  }
}

std::int64_t sum_of_squares_scratch_elements(std::int64_t count) { return (count + kSumBlockElements - 1) / kSumBlockElements; }

void sum_of_squares(double* result, bool accumulate, const float* values, std::int64_t count, double* scratch, cudaStream_t stream) {
  const std::int64_t blocks = sum_of_squares_scratch_elements(count);
  if (blocks > 0) {
    FERRY_LAUNCH_KERNEL(block_sum_of_squares_kernel, static_cast<unsigned int>(blocks), kThreads, 0, stream, scratch, values, count);
  }
  FERRY_LAUNCH_KERNEL(add_partials_kernel, 1, 1, 0, stream, result, accumulate, scratch, blocks);
}

}  // namespace ferry::cuda
