#include "models/kernels/cuda/encoder.h"
#include "models/kernels/cuda/kernel_launch.h"

#include <limits>

namespace ferry::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float table_value(const float* table, std::int64_t at) { return table[at]; }
__device__ float table_value(const std::uint16_t* table, std::int64_t at) { return __uint_as_float(static_cast<std::uint32_t>(table[at]) << 16); }

// One thread per output element.
template <typename Table>
__global__ void encoder_forward_kernel(float* out, const std::int32_t* tokens, const Table* wte, const float* wpe, std::int64_t positions,
                                       std::int64_t sequence, std::int64_t channels) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= positions * channels) return;
  const std::int64_t position = i / channels, c = i % channels;
  const std::int64_t t = position % sequence;
  out[i] = table_value(wte, static_cast<std::int64_t>(tokens[position]) * channels + c) + wpe[t * channels + c];
}

// dwpe[t, c]: one thread each, adding batch rows in order.
__global__ void position_gradient_kernel(float* dwpe, const float* dout, std::int64_t batch, std::int64_t sequence, std::int64_t channels) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= sequence * channels) return;
  float sum = dwpe[i];
  for (std::int64_t b = 0; b < batch; ++b) sum += dout[b * sequence * channels + i];
  dwpe[i] = sum;
}

// dwte[:, c]: one thread per channel and token class walks every position in order, so a token row that
// repeats is summed in the CPU's order. The token classes (token % kTokenClasses, blockIdx.y) give the
// channels' few threads company: each row belongs to one class, every class reads the tokens and only
// its own rows of dout (one class per channel took 7.4 ms of a gpt2 step at batch 16 on an H200).
// Rows outside [first, first + count) are skipped; the table holds rows from `first` on.
constexpr int kTokenClasses = 64;

__global__ void token_gradient_kernel(float* dwte, const float* dout, const std::int32_t* tokens, std::int64_t positions, std::int64_t channels,
                                      std::int64_t first, std::int64_t count) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  const std::int32_t token_class = static_cast<std::int32_t>(blockIdx.y);
  for (std::int64_t position = 0; position < positions; ++position) {
    if (tokens[position] % kTokenClasses != token_class) continue;
    const std::int64_t row = static_cast<std::int64_t>(tokens[position]) - first;
    if (row < 0 || row >= count) continue;
    dwte[row * channels + c] += dout[position * channels + c];
  }
}

template <typename Table>
void launch_encoder_forward(float* out, const std::int32_t* tokens, const Table* wte, const float* wpe, std::int64_t batch,
                            std::int64_t sequence, std::int64_t channels, cudaStream_t stream) {
  const std::int64_t count = batch * sequence * channels;
  if (count == 0) return;
  FERRY_LAUNCH_KERNEL(encoder_forward_kernel<Table>, blocks_for(count, kThreads), kThreads, 0, stream, out, tokens, wte, wpe, batch * sequence,
                      sequence, channels);
}

}  // namespace

void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t batch, std::int64_t sequence,
                     std::int64_t channels, cudaStream_t stream) {
  launch_encoder_forward(out, tokens, wte, wpe, batch, sequence, channels, stream);
}

void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe, std::int64_t batch,
                                std::int64_t sequence, std::int64_t channels, cudaStream_t stream) {
  launch_encoder_forward(out, tokens, wte, wpe, batch, sequence, channels, stream);
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t batch, std::int64_t sequence,
                      std::int64_t channels, cudaStream_t stream) {
  if (batch * sequence * channels == 0) return;
  FERRY_LAUNCH_KERNEL(position_gradient_kernel, blocks_for(sequence * channels, kThreads), kThreads, 0, stream, dwpe, dout, batch, sequence,
                      channels);
  if (dwte == nullptr) return;
  FERRY_LAUNCH_KERNEL(token_gradient_kernel, dim3(blocks_for(channels, kThreads), kTokenClasses), kThreads, 0, stream, dwte, dout, tokens,
                      batch * sequence, channels, std::int64_t{0}, std::numeric_limits<std::int64_t>::max());
}

void encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                 std::int64_t channels, std::int64_t first, std::int64_t count, cudaStream_t stream) {
  if (positions * channels == 0 || count == 0) return;
  FERRY_LAUNCH_KERNEL(token_gradient_kernel, dim3(blocks_for(channels, kThreads), kTokenClasses), kThreads, 0, stream, table_rows, dout, tokens,
                      positions, channels, first, count);
}

}  // namespace ferry::cuda
