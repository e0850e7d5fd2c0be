#include "models/kernels/cuda/cross_entropy.h"
#include "models/kernels/cuda/kernel_launch.h"
#include "models/kernels/cuda/warp_reduce.cuh"

namespace ferry::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;

// The block's maximum and sum, in a fixed order: lanes, then warps in index order.
__device__ float block_max(float value, float* shared) {
  value = warp_max(value);
  if (threadIdx.x % kWarpSize == 0) shared[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  float result = shared[0];
  for (int warp = 1; warp < kWarps; ++warp) result = fmaxf(result, shared[warp]);
  __syncthreads();
  return result;
}

__device__ double block_sum(double value, double* shared) {
  value = warp_sum(value);
  if (threadIdx.x % kWarpSize == 0) shared[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  double result = 0;
  for (int warp = 0; warp < kWarps; ++warp) result += shared[warp];
  __syncthreads();
  return result;
}

// logits of one row: its loss, and with `gradient` the row becomes (softmax - onehot) * dloss.
__global__ void cross_entropy_kernel(float* logits, float* losses, const std::int32_t* targets, std::int64_t vocab, bool gradient,
                                     float dloss) {
  FERRY_SHARED(float, maxima, [kWarps]);
  FERRY_SHARED(double, sums, [kWarps]);
  float* values = logits + blockIdx.x * vocab;
  float maximum = -INFINITY;
  for (std::int64_t i = threadIdx.x; i < vocab; i += kThreads) maximum = fmaxf(maximum, values[i]);
  maximum = block_max(maximum, maxima);
  double sum = 0;
  for (std::int64_t i = threadIdx.x; i < vocab; i += kThreads) sum += exp(static_cast<double>(values[i] - maximum));
  sum = block_sum(sum, sums);
  const std::int32_t target = targets[blockIdx.x];
  if (threadIdx.x == 0) {
    losses[blockIdx.x] = static_cast<float>(log(sum) + static_cast<double>(maximum) - static_cast<double>(values[target]));
  }
  if (!gradient) return;
  __syncthreads();  // the target's logit is read above before any thread overwrites it
  const double inverse_sum = 1.0 / sum;
  for (std::int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const double probability = exp(static_cast<double>(values[i]) - static_cast<double>(maximum)) * inverse_sum;
    values[i] = static_cast<float>((probability - (i == target ? 1.0 : 0.0)) * static_cast<double>(dloss));
  }
}

void launch(float* logits, float* losses, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab, bool gradient, float dloss,
            cudaStream_t stream) {
  if (rows == 0) return;
  FERRY_LAUNCH_KERNEL(cross_entropy_kernel, static_cast<unsigned int>(rows), kThreads, 0, stream, logits, losses, targets, vocab, gradient,
                      dloss);
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           cudaStream_t stream) {
  launch(const_cast<float*>(logits), losses, targets, rows, vocab, false, 0.0f, stream);  // read only without the gradient
}

void cross_entropy_forward_backward(float* logits, float* losses, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                    float dloss, cudaStream_t stream) {
  launch(logits, losses, targets, rows, vocab, true, dloss, stream);
}

}  // namespace ferry::cuda
