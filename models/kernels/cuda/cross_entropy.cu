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

// One logit's gradient: the same expression as the CPU twin's.
__device__ float logit_gradient(float logit, double maximum, double inverse_sum, bool target, double dloss) {
  const double probability = exp(static_cast<double>(logit) - maximum) * inverse_sum;
  return static_cast<float>((probability - (target ? 1.0 : 0.0)) * dloss);
}

// logits of one row: its loss, and with `gradient` the row becomes (softmax - onehot) * dloss.
__global__ void cross_entropy_kernel(float* logits, float* losses, const std::int32_t* targets, std::int64_t vocab, std::int64_t row_stride,
                                     bool gradient, float dloss, SoftmaxRow* softmax_rows) {
  FERRY_SHARED(float, maxima, [kWarps]);
  FERRY_SHARED(double, sums, [kWarps]);
  float* values = logits + blockIdx.x * row_stride;
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
  if (softmax_rows != nullptr && threadIdx.x == 0) softmax_rows[blockIdx.x] = SoftmaxRow{static_cast<double>(maximum), inverse_sum};
  for (std::int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    values[i] = logit_gradient(values[i], static_cast<double>(maximum), inverse_sum, i == target, static_cast<double>(dloss));
  }
}

// One thread per element of the [rows, count] slice.
__global__ void cross_entropy_slice_kernel(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                           std::int64_t first, std::int64_t count, float dloss) {
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * count) return;
  const std::int64_t row = index / count, column = index % count;
  const SoftmaxRow softmax = softmax_rows[row];
  slice[index] = logit_gradient(slice[index], softmax.maximum, softmax.inverse_sum, first + column == targets[row], static_cast<double>(dloss));
}

void launch(float* logits, float* losses, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab, std::int64_t row_stride,
            bool gradient, float dloss, cudaStream_t stream, SoftmaxRow* softmax_rows = nullptr) {
  if (rows == 0) return;
  FERRY_LAUNCH_KERNEL(cross_entropy_kernel, static_cast<unsigned int>(rows), kThreads, 0, stream, logits, losses, targets, vocab,
                      row_stride > 0 ? row_stride : vocab, gradient, dloss, softmax_rows);
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           cudaStream_t stream, std::int64_t row_stride) {
  launch(const_cast<float*>(logits), losses, targets, rows, vocab, row_stride, false, 0.0f, stream);  // read only without the gradient
}

void cross_entropy_forward_backward(float* logits, float* losses, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                    float dloss, cudaStream_t stream, SoftmaxRow* softmax_rows, std::int64_t row_stride) {
  launch(logits, losses, targets, rows, vocab, row_stride, true, dloss, stream, softmax_rows);
}

void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                  std::int64_t first, std::int64_t count, float dloss, cudaStream_t stream) {
  const std::int64_t elements = rows * count;
  if (elements == 0) return;
  FERRY_LAUNCH_KERNEL(cross_entropy_slice_kernel, blocks_for(elements, kThreads), kThreads, 0, stream, slice,
                      softmax_rows, targets, rows, first, count, dloss);
}

}  // namespace ferry::cuda
