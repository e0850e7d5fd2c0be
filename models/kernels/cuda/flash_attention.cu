#include "models/kernels/cuda/flash_attention.h"

#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "models/kernels/cuda/flash_attention_problem.cuh"
#include "models/kernels/cuda/kernel_launch.h"
#include "models/kernels/cuda/warp_reduce.cuh"

// Every block owns one square tile of query rows (forward, dQ) or key rows (dK, dV) of one (batch, head) and
// walks the tiles of the other side that the causal mask leaves visible, staging both in shared memory.
// Each tile row is worked on by `lanes` adjacent threads of a warp: for scores they split the row's entries,
// for the head-size-wide accumulators they split the head dimensions. Nothing is summed by two threads, so
// there are no atomics and results repeat bit for bit.
namespace ferry::cuda {
namespace {

using flash::EntryGradient;
using flash::HeadView;
using flash::Problem;
using flash::dropout_factor;
using flash::entry_gradient;
using flash::head_view;
using flash::row_max;
using flash::row_sum;

constexpr int kThreads = 256;

// Tile geometry for heads of up to HeadCapacity floats (shorter heads are zero-padded in shared memory).
template <int HeadCapacity>
struct Tiles {
  static constexpr int rows = HeadCapacity <= 64 ? 32 : 16;      // queries or keys per tile
  static constexpr int lanes = kThreads / rows;                 // threads per tile row: 8 or 16
  static constexpr int entries_per_thread = rows / lanes;       // score entries of a row per thread: 4 or 1
  static constexpr int dimensions_per_thread = HeadCapacity / lanes;
  static constexpr int stride = HeadCapacity + 1;               // padded: a column's reads hit distinct banks
  static_assert(kThreads % rows == 0 && rows % lanes == 0 && HeadCapacity % lanes == 0 && kWarpSize % lanes == 0);
};

template <int HeadCapacity>
__device__ void load_tile(float (*tile)[Tiles<HeadCapacity>::stride], const float* source, std::int64_t row_stride, int first_row,
                          const Problem& problem) {
  for (int element = threadIdx.x; element < Tiles<HeadCapacity>::rows * HeadCapacity; element += kThreads) {
    const int row = element / HeadCapacity, dimension = element % HeadCapacity;
    const int position = first_row + row;
    tile[row][dimension] =
        position < problem.sequence && dimension < problem.head_size ? source[position * row_stride + dimension] : 0.0f;
  }
}

// sums[e] = a . tile[first_row + e * step] for each of a thread's entries, each summed over the dimensions
// in order: a's value at each dimension is read from shared memory once for all entries (a dot product
// per entry read it again for each: two reads per multiply-add, which bounded these kernels).
template <int HeadCapacity, int Entries>
__device__ void dots_with_tile_rows(float (&sums)[Entries], const float* a, const float (*tile)[Tiles<HeadCapacity>::stride], int first_row,
                                    int step) {
#pragma unroll
  for (int entry = 0; entry < Entries; ++entry) sums[entry] = 0.0f;
#pragma unroll 16
  for (int dimension = 0; dimension < HeadCapacity; ++dimension) {
    const float value = a[dimension];
#pragma unroll
    for (int entry = 0; entry < Entries; ++entry) sums[entry] += value * tile[first_row + entry * step][dimension];
  }
}

template <int HeadCapacity>
__global__ void __launch_bounds__(kThreads) forward_kernel(float* out, float* logsumexp, const float* qkv, Problem problem) {
  using Tile = Tiles<HeadCapacity>;
  constexpr int rows = Tile::rows, lanes = Tile::lanes;
  FERRY_SHARED(float, query_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, key_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, value_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, weight_tile, [rows][rows + 1]);  // [query][key]: this key tile's dropped, unnormalized probabilities

  const int query_tile_index = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // the longest rows start first
  const HeadView head = head_view(problem, static_cast<int>(blockIdx.y));
  const int row = static_cast<int>(threadIdx.x) / lanes, lane = static_cast<int>(threadIdx.x) % lanes;
  const int first_query = query_tile_index * rows;
  const int query = first_query + row;  // past the sequence's end in a ragged last tile: computed, never stored
  const std::int64_t qkv_stride = 3 * static_cast<std::int64_t>(problem.channels);
  const float* queries = qkv + head.qkv_offset;
  load_tile<HeadCapacity>(query_tile, queries, qkv_stride, first_query, problem);

  float running_max = -INFINITY, running_sum = 0.0f;
  float accumulator[Tile::dimensions_per_thread] = {};
  // Key tiles past the diagonal one are entirely in the future of every query here.
  for (int key_tile_index = 0; key_tile_index <= query_tile_index; ++key_tile_index) {
    const int first_key = key_tile_index * rows;
    __syncthreads();  // the previous tile's keys, values and weights are read
    load_tile<HeadCapacity>(key_tile, queries + problem.channels, qkv_stride, first_key, problem);
    load_tile<HeadCapacity>(value_tile, queries + 2 * problem.channels, qkv_stride, first_key, problem);
    __syncthreads();

    float scores[Tile::entries_per_thread];
    dots_with_tile_rows<HeadCapacity>(scores, query_tile[row], key_tile, lane, lanes);
    float tile_max = -INFINITY;
#pragma unroll
    for (int entry = 0; entry < Tile::entries_per_thread; ++entry) {
      const int column = lane + entry * lanes, key = first_key + column;
      scores[entry] = key <= query && key < problem.sequence ? problem.scale * scores[entry] : -INFINITY;
      tile_max = fmaxf(tile_max, scores[entry]);
    }
    // Finite: the tile's first key is at most the query and inside the sequence.
    const float new_max = fmaxf(running_max, row_max<lanes>(tile_max));
    const float correction = expf(running_max - new_max);  // 0 on the first tile
    float tile_sum = 0.0f;
#pragma unroll
    for (int entry = 0; entry < Tile::entries_per_thread; ++entry) {
      const int column = lane + entry * lanes;
      const float probability = expf(scores[entry] - new_max);  // up to the row's final normalization
      tile_sum += probability;
      weight_tile[row][column] =
          probability > 0.0f ? probability * dropout_factor(problem, head, query, first_key + column) : 0.0f;
    }
    running_sum = running_sum * correction + row_sum<lanes>(tile_sum);  // of undropped probabilities
    running_max = new_max;
#pragma unroll
    for (int i = 0; i < Tile::dimensions_per_thread; ++i) accumulator[i] *= correction;
    __syncthreads();  // the weight tile is complete
    for (int column = 0; column < rows; ++column) {
      const float weight = weight_tile[row][column];
#pragma unroll
      for (int i = 0; i < Tile::dimensions_per_thread; ++i) accumulator[i] += weight * value_tile[column][lane + i * lanes];
    }
  }
  if (query >= problem.sequence) return;
  const float inverse_sum = 1.0f / running_sum;
  float* out_row = out + head.out_offset + query * static_cast<std::int64_t>(problem.channels);
#pragma unroll
  for (int i = 0; i < Tile::dimensions_per_thread; ++i) {
    const int dimension = lane + i * lanes;
    if (dimension < problem.head_size) out_row[dimension] = accumulator[i] * inverse_sum;
  }
  if (lane == 0) logsumexp[head.statistics_offset + query] = running_max + logf(running_sum);
}

// row_dot[b, h, t] = dout[b, t, h] . out[b, t, h], FlashAttention-2's D: one warp per query row. With dropout
// it still equals rowsum(P * dP) of the undropped P, since out already carries the mask.
__global__ void __launch_bounds__(kThreads) row_dot_kernel(float* row_dot, const float* dout, const float* out, Problem problem,
                                                           std::int64_t row_count) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (kThreads / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= row_count) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const std::int64_t position = row % problem.sequence, batch_head = row / problem.sequence;
  const std::int64_t offset = (batch_head / problem.heads * problem.sequence + position) * problem.channels +
                              batch_head % problem.heads * problem.head_size;
  float sum = 0.0f;
  for (int dimension = lane; dimension < problem.head_size; dimension += kWarpSize) {
    sum += dout[offset + dimension] * out[offset + dimension];
  }
  sum = warp_sum(sum);
  if (lane == 0) row_dot[row] = sum;
}

// dK and dV of one key tile, over the query tiles from the diagonal one down.
template <int HeadCapacity>
__global__ void __launch_bounds__(kThreads) key_value_gradient_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                      const float* logsumexp, const float* row_dot, Problem problem) {
  using Tile = Tiles<HeadCapacity>;
  constexpr int rows = Tile::rows, lanes = Tile::lanes;
  FERRY_SHARED(float, key_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, value_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, query_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, dout_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, dropped_probability_tile, [rows][rows + 1]);  // [query][key]
  FERRY_SHARED(float, score_gradient_tile, [rows][rows + 1]);       // [query][key]
  FERRY_SHARED(float, tile_logsumexp, [rows]);
  FERRY_SHARED(float, tile_row_dot, [rows]);

  const int key_tile_index = static_cast<int>(blockIdx.x);  // the first key tiles see the most queries: they start first
  const int query_tile_count = static_cast<int>(gridDim.x);
  const HeadView head = head_view(problem, static_cast<int>(blockIdx.y));
  const int key_row = static_cast<int>(threadIdx.x) / lanes, lane = static_cast<int>(threadIdx.x) % lanes;
  const int first_key = key_tile_index * rows;
  const int key = first_key + key_row;
  const std::int64_t qkv_stride = 3 * static_cast<std::int64_t>(problem.channels);
  const float* queries = qkv + head.qkv_offset;
  const float* dout_rows = dout + head.out_offset;
  load_tile<HeadCapacity>(key_tile, queries + problem.channels, qkv_stride, first_key, problem);
  load_tile<HeadCapacity>(value_tile, queries + 2 * problem.channels, qkv_stride, first_key, problem);

  float key_gradient[Tile::dimensions_per_thread] = {};
  float value_gradient[Tile::dimensions_per_thread] = {};
  for (int query_tile_index = key_tile_index; query_tile_index < query_tile_count; ++query_tile_index) {
    const int first_query = query_tile_index * rows;
    __syncthreads();  // the previous query tile and entry tiles are read
    load_tile<HeadCapacity>(query_tile, queries, qkv_stride, first_query, problem);
    load_tile<HeadCapacity>(dout_tile, dout_rows, problem.channels, first_query, problem);
    if (static_cast<int>(threadIdx.x) < rows) {
      const int query = first_query + static_cast<int>(threadIdx.x);
      const bool inside = query < problem.sequence;
      tile_logsumexp[threadIdx.x] = inside ? logsumexp[head.statistics_offset + query] : 0.0f;
      tile_row_dot[threadIdx.x] = inside ? row_dot[head.statistics_offset + query] : 0.0f;
    }
    __syncthreads();
    float query_key[Tile::entries_per_thread], dout_value[Tile::entries_per_thread];
    dots_with_tile_rows<HeadCapacity>(query_key, key_tile[key_row], query_tile, lane, lanes);
    dots_with_tile_rows<HeadCapacity>(dout_value, value_tile[key_row], dout_tile, lane, lanes);
#pragma unroll
    for (int entry = 0; entry < Tile::entries_per_thread; ++entry) {
      const int query_row = lane + entry * lanes;
      const EntryGradient gradient = entry_gradient(problem, head, first_query + query_row, key, query_key[entry], dout_value[entry],
                                                    tile_logsumexp[query_row], tile_row_dot[query_row]);
      dropped_probability_tile[query_row][key_row] = gradient.dropped_probability;
      score_gradient_tile[query_row][key_row] = gradient.score_gradient;
    }
    __syncthreads();
    for (int query_row = 0; query_row < rows; ++query_row) {
      const float dropped_probability = dropped_probability_tile[query_row][key_row];
      const float score_gradient = score_gradient_tile[query_row][key_row];
#pragma unroll
      for (int i = 0; i < Tile::dimensions_per_thread; ++i) {
        const int dimension = lane + i * lanes;
        value_gradient[i] += dropped_probability * dout_tile[query_row][dimension];  // dV = P_dropped^T dO
        key_gradient[i] += score_gradient * query_tile[query_row][dimension];        // dK = dS^T Q
      }
    }
  }
  if (key >= problem.sequence) return;
  float* key_gradient_row = dqkv + head.qkv_offset + key * qkv_stride + problem.channels;
  float* value_gradient_row = key_gradient_row + problem.channels;
#pragma unroll
  for (int i = 0; i < Tile::dimensions_per_thread; ++i) {
    const int dimension = lane + i * lanes;
    if (dimension >= problem.head_size) continue;
    key_gradient_row[dimension] = key_gradient[i];
    value_gradient_row[dimension] = value_gradient[i];
  }
}

// dQ of one query tile, over the key tiles up to the diagonal one.
template <int HeadCapacity>
__global__ void __launch_bounds__(kThreads) query_gradient_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                  const float* logsumexp, const float* row_dot, Problem problem) {
  using Tile = Tiles<HeadCapacity>;
  constexpr int rows = Tile::rows, lanes = Tile::lanes;
  FERRY_SHARED(float, query_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, dout_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, key_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, value_tile, [rows][Tile::stride]);
  FERRY_SHARED(float, score_gradient_tile, [rows][rows + 1]);  // [query][key]

  const int query_tile_index = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // the longest rows start first
  const HeadView head = head_view(problem, static_cast<int>(blockIdx.y));
  const int row = static_cast<int>(threadIdx.x) / lanes, lane = static_cast<int>(threadIdx.x) % lanes;
  const int first_query = query_tile_index * rows;
  const int query = first_query + row;
  const bool inside = query < problem.sequence;
  const std::int64_t qkv_stride = 3 * static_cast<std::int64_t>(problem.channels);
  const float* queries = qkv + head.qkv_offset;
  load_tile<HeadCapacity>(query_tile, queries, qkv_stride, first_query, problem);
  load_tile<HeadCapacity>(dout_tile, dout + head.out_offset, problem.channels, first_query, problem);
  const float row_logsumexp = inside ? logsumexp[head.statistics_offset + query] : 0.0f;
  const float row_dot_value = inside ? row_dot[head.statistics_offset + query] : 0.0f;

  float query_gradient[Tile::dimensions_per_thread] = {};
  for (int key_tile_index = 0; key_tile_index <= query_tile_index; ++key_tile_index) {
    const int first_key = key_tile_index * rows;
    __syncthreads();  // the previous key tile and score gradients are read
    load_tile<HeadCapacity>(key_tile, queries + problem.channels, qkv_stride, first_key, problem);
    load_tile<HeadCapacity>(value_tile, queries + 2 * problem.channels, qkv_stride, first_key, problem);
    __syncthreads();
    float query_key[Tile::entries_per_thread], dout_value[Tile::entries_per_thread];
    dots_with_tile_rows<HeadCapacity>(query_key, query_tile[row], key_tile, lane, lanes);
    dots_with_tile_rows<HeadCapacity>(dout_value, dout_tile[row], value_tile, lane, lanes);
#pragma unroll
    for (int entry = 0; entry < Tile::entries_per_thread; ++entry) {
      const int column = lane + entry * lanes;
      score_gradient_tile[row][column] =
          entry_gradient(problem, head, query, first_key + column, query_key[entry], dout_value[entry], row_logsumexp, row_dot_value)
              .score_gradient;
    }
    __syncthreads();
    for (int column = 0; column < rows; ++column) {
      const float score_gradient = score_gradient_tile[row][column];
#pragma unroll
      for (int i = 0; i < Tile::dimensions_per_thread; ++i) query_gradient[i] += score_gradient * key_tile[column][lane + i * lanes];
    }
  }
  if (!inside) return;
  float* query_gradient_row = dqkv + head.qkv_offset + query * qkv_stride;
#pragma unroll
  for (int i = 0; i < Tile::dimensions_per_thread; ++i) {
    const int dimension = lane + i * lanes;
    if (dimension < problem.head_size) query_gradient_row[dimension] = query_gradient[i];
  }
}

// ---- Host side: validation and launches.

Problem make_problem(const cpu::AttentionShape& shape, float dropout, cpu::RandomKey key, const char* operation) {
  const auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(operation) + ": " + what); };
  const auto [batch, sequence, channels, heads] = shape;
  if (batch <= 0 || sequence <= 0 || channels <= 0 || heads <= 0) {
    fail("batch, sequence, channels and heads must be positive (got " + std::to_string(batch) + ", " + std::to_string(sequence) +
         ", " + std::to_string(channels) + ", " + std::to_string(heads) + ")");
  }
  if (channels % heads != 0) fail("channels " + std::to_string(channels) + " are not divisible by heads " + std::to_string(heads));
  const std::int64_t head_size = channels / heads;
  if (head_size > kFlashAttentionMaxHeadSize) {
    fail("head size " + std::to_string(head_size) + " (channels " + std::to_string(channels) + " / heads " + std::to_string(heads) +
         ") is above the supported " + std::to_string(kFlashAttentionMaxHeadSize));
  }
  if (sequence > INT_MAX / 2 || 3 * channels > INT_MAX) {
    fail("sequence " + std::to_string(sequence) + " or channels " + std::to_string(channels) + " too large");
  }
  if (batch * heads > 65535) fail("batch x heads " + std::to_string(batch * heads) + " is above the grid's 65535");
  if (!(dropout >= 0.0f && dropout < 1.0f)) fail("dropout must be in [0, 1), got " + std::to_string(dropout));
  return Problem{static_cast<int>(sequence),
                 static_cast<int>(channels),
                 static_cast<int>(heads),
                 static_cast<int>(head_size),
                 1.0f / std::sqrt(static_cast<float>(head_size)),
                 dropout,
                 dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f,
                 key};
}

// Blocks: tiles of the sequence along x, (batch, head) along y.
template <int HeadCapacity>
dim3 tile_grid(const cpu::AttentionShape& shape) {
  return dim3(blocks_for(shape.sequence, Tiles<HeadCapacity>::rows), static_cast<unsigned int>(shape.batch * shape.heads));
}

template <int HeadCapacity>
void launch_forward(float* out, float* logsumexp, const float* qkv, const cpu::AttentionShape& shape, const Problem& problem,
                    cudaStream_t stream) {
  FERRY_LAUNCH_KERNEL(forward_kernel<HeadCapacity>, tile_grid<HeadCapacity>(shape), kThreads, 0, stream, out, logsumexp, qkv, problem);
}

template <int HeadCapacity>
void launch_backward(float* dqkv, const float* dout, const float* qkv, const float* logsumexp, const float* row_dot,
                     const cpu::AttentionShape& shape, const Problem& problem, cudaStream_t stream) {
  const dim3 grid = tile_grid<HeadCapacity>(shape);
  FERRY_LAUNCH_KERNEL(key_value_gradient_kernel<HeadCapacity>, grid, kThreads, 0, stream, dqkv, dout, qkv, logsumexp, row_dot, problem);
  FERRY_LAUNCH_KERNEL(query_gradient_kernel<HeadCapacity>, grid, kThreads, 0, stream, dqkv, dout, qkv, logsumexp, row_dot, problem);
}

}  // namespace

void flash_attention_forward(float* out, float* logsumexp, const float* qkv, cpu::AttentionShape shape, float dropout,
                             cpu::RandomKey key, AttentionProducts products, cudaStream_t stream) {
  const Problem problem = make_problem(shape, dropout, key, "flash_attention_forward");
  if (products == AttentionProducts::bf16) flash::launch_bf16_forward(out, logsumexp, qkv, shape, problem, stream);
  else if (problem.head_size <= 64) launch_forward<64>(out, logsumexp, qkv, shape, problem, stream);
  else launch_forward<128>(out, logsumexp, qkv, shape, problem, stream);
}

std::int64_t flash_attention_scratch_elements(cpu::AttentionShape shape) { return shape.batch * shape.heads * shape.sequence; }

void flash_attention_backward(float* dqkv, float* row_dot_scratch, const float* dout, const float* out, const float* qkv,
                              const float* logsumexp, cpu::AttentionShape shape, float dropout, cpu::RandomKey key,
                              AttentionProducts products, cudaStream_t stream) {
  const Problem problem = make_problem(shape, dropout, key, "flash_attention_backward");
  const std::int64_t rows = flash_attention_scratch_elements(shape);
  FERRY_LAUNCH_KERNEL(row_dot_kernel, blocks_for(rows, kThreads / kWarpSize), kThreads, 0, stream, row_dot_scratch, dout, out, problem, rows);
  if (products == AttentionProducts::bf16) flash::launch_bf16_backward(dqkv, dout, qkv, logsumexp, row_dot_scratch, shape, problem, stream);
  else if (problem.head_size <= 64) launch_backward<64>(dqkv, dout, qkv, logsumexp, row_dot_scratch, shape, problem, stream);
  else launch_backward<128>(dqkv, dout, qkv, logsumexp, row_dot_scratch, shape, problem, stream);
}

}  // namespace ferry::cuda
