// The flash attention kernels on the tensor cores: the fp32 kernels' algorithm (flash_attention.cu) with every
// product of tiles done by warp-wide TF32 mma (warp_mma.cuh). Each warp owns 16 rows (queries for the forward
// and dQ, keys for dK and dV) held as fragments in registers; the block's 4 warps share 32 staged rows of the
// other side in shared memory. No atomics: every output element is summed by one lane in a fixed order.
#include <algorithm>
#include <cmath>

#include "models/kernels/cuda/flash_attention_problem.cuh"
#include "models/kernels/cuda/flash_attention_warps.cuh"
#include "models/kernels/cuda/kernel_launch.h"
#include "models/kernels/cuda/warp_mma.cuh"
#include "models/kernels/cuda/warp_reduce.cuh"

namespace ferry::cuda::flash {
namespace {

constexpr int kStagedRows = 32;                   // rows of the other side staged per step
constexpr int kStagedTiles = kStagedRows / 8;     // 8-wide tiles of a staged step's product

template <int HeadCapacity>
struct MmaTiles {
  static_assert(HeadCapacity % 8 == 0);
  static constexpr int steps = HeadCapacity / 8;    // 8-wide steps over the head's dimensions
  static constexpr int stride = HeadCapacity + 4;   // floats per staged row: a fragment's 32 reads hit 32 banks
};

template <int HeadCapacity>
using StagedTile = float[kStagedRows][MmaTiles<HeadCapacity>::stride];

// tile[r][d] = source[(first_row + r) * row_stride + d] rounded to TF32, zero past the sequence and the head.
template <int HeadCapacity>
__device__ void stage_rows(StagedTile<HeadCapacity>& tile, const float* source, std::int64_t row_stride, int first_row,
                           const Problem& problem) {
  for (int element = static_cast<int>(threadIdx.x); element < kStagedRows * HeadCapacity; element += kMmaThreads) {
    const int row = element / HeadCapacity, dimension = element % HeadCapacity, position = first_row + row;
    tile[row][dimension] = position < problem.sequence && dimension < problem.head_size
                               ? round_to_tf32(source[position * row_stride + dimension])
                               : 0.0f;
  }
}

// A warp's rows [first_row, first_row + 16) of source as A fragments, one per 8 dimensions, read from global.
template <int HeadCapacity>
__device__ void load_row_fragments(FragmentA (&fragments)[MmaTiles<HeadCapacity>::steps], const float* source,
                                   std::int64_t row_stride, int first_row, const Problem& problem) {
  const LanePlace place = lane_place();
#pragma unroll
  for (int step = 0; step < MmaTiles<HeadCapacity>::steps; ++step) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = first_row + place.group + 8 * (i % 2), dimension = 8 * step + place.thread + 4 * (i / 2);
      fragments[step].x[i] =
          row < problem.sequence && dimension < problem.head_size ? round_to_tf32(source[row * row_stride + dimension]) : 0.0f;
    }
  }
}

// result[n] (16 x 8) = rows (16 x head) . staged rows [8n, 8n + 8)^T: scores of a warp's rows against 32 staged ones.
template <int HeadCapacity>
__device__ void product_with_staged_rows(FragmentC (&result)[kStagedTiles], const FragmentA (&rows)[MmaTiles<HeadCapacity>::steps],
                                         const StagedTile<HeadCapacity>& tile) {
  const LanePlace place = lane_place();
#pragma unroll
  for (int n = 0; n < kStagedTiles; ++n) result[n] = FragmentC{};
#pragma unroll
  for (int step = 0; step < MmaTiles<HeadCapacity>::steps; ++step) {
#pragma unroll
    for (int n = 0; n < kStagedTiles; ++n) {
      const float* staged_row = tile[8 * n + place.group] + 8 * step + place.thread;
      mma_tf32(result[n], rows[step], FragmentB{{staged_row[0], staged_row[4]}});
    }
  }
}

// accumulator (16 x head, one fragment per 8 dimensions) += weights (16 x 32) . staged rows (32 x head).
template <int HeadCapacity>
__device__ void accumulate_weighted_rows(FragmentC (&accumulator)[MmaTiles<HeadCapacity>::steps], const FragmentC (&weights)[kStagedTiles],
                                         const StagedTile<HeadCapacity>& tile) {
  const LanePlace place = lane_place();
#pragma unroll
  for (int k = 0; k < kStagedTiles; ++k) {
    const FragmentA weight_fragment = c_to_a_fragment(weights[k]);
    const float* low = tile[8 * k + place.thread] + place.group;
    const float* high = tile[8 * k + place.thread + 4] + place.group;
#pragma unroll
    for (int n = 0; n < MmaTiles<HeadCapacity>::steps; ++n) mma_tf32(accumulator[n], weight_fragment, FragmentB{{low[8 * n], high[8 * n]}});
  }
}

// Stages keys and values [first_key, first_key + 32) for the whole block, between barriers (every warp is
// done with the previous ones).
template <int HeadCapacity>
__device__ void stage_keys_and_values(StagedTile<HeadCapacity>& key_tile, StagedTile<HeadCapacity>& value_tile, const QueryWarp& warp,
                                      int first_key, const Problem& problem) {
  __syncthreads();
  stage_rows<HeadCapacity>(key_tile, warp.queries + problem.channels, warp.qkv_stride, first_key, problem);
  stage_rows<HeadCapacity>(value_tile, warp.queries + 2 * problem.channels, warp.qkv_stride, first_key, problem);
  __syncthreads();
}

template <int HeadCapacity>
__global__ void __launch_bounds__(kMmaThreads) forward_tf32_kernel(float* out, float* logsumexp, const float* qkv, Problem problem) {
  using Tiles = MmaTiles<HeadCapacity>;
  FERRY_SHARED(float, key_tile, [kStagedRows][Tiles::stride]);
  FERRY_SHARED(float, value_tile, [kStagedRows][Tiles::stride]);
  const QueryWarp warp = query_warp(qkv, problem);
  const HeadView& head = warp.head;
  const LanePlace& place = warp.place;
  const int first_query = warp.first_query;
  const int(&queries_of_lane)[2] = warp.queries_of_lane;
  FragmentA query_rows[Tiles::steps];
  load_row_fragments<HeadCapacity>(query_rows, warp.queries, warp.qkv_stride, first_query, problem);

  float running_max[2] = {-INFINITY, -INFINITY}, running_sum[2] = {0.0f, 0.0f};
  FragmentC accumulator[Tiles::steps] = {};
  const bool warp_has_rows = first_query < problem.sequence;
  for (int first_key = 0; first_key <= warp.last_key; first_key += kStagedRows) {
    stage_keys_and_values<HeadCapacity>(key_tile, value_tile, warp, first_key, problem);
    // Staged tiles start at multiples of 32, warps' rows at multiples of 16: a tile either starts at or before
    // the warp's first query (every row then sees its first key: finite maxima) or lies in all its rows' future.
    if (!warp_has_rows || first_key > first_query) continue;
    FragmentC scores[kStagedTiles];
    product_with_staged_rows<HeadCapacity>(scores, query_rows, key_tile);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kStagedTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = first_key + 8 * n + 2 * place.thread + i % 2;
        const float score = key <= queries_of_lane[i / 2] && key < problem.sequence ? problem.scale * scores[n].x[i] : -INFINITY;
        scores[n].x[i] = score;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], score);
      }
    }
    float new_max[2], correction[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      new_max[half] = fmaxf(running_max[half], row_max<4>(tile_max[half]));
      correction[half] = expf(running_max[half] - new_max[half]);  // 0 on the first tile
    }
#pragma unroll
    for (int n = 0; n < kStagedTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = first_key + 8 * n + 2 * place.thread + i % 2;
        const float probability = expf(scores[n].x[i] - new_max[i / 2]);  // up to the row's final normalization
        tile_sum[i / 2] += probability;
        scores[n].x[i] = probability > 0.0f ? probability * dropout_factor(problem, head, queries_of_lane[i / 2], key) : 0.0f;
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      running_sum[half] = running_sum[half] * correction[half] + row_sum<4>(tile_sum[half]);  // of undropped probabilities
      running_max[half] = new_max[half];
    }
#pragma unroll
    for (int n = 0; n < Tiles::steps; ++n) {
      accumulator[n].x[0] *= correction[0], accumulator[n].x[1] *= correction[0];
      accumulator[n].x[2] *= correction[1], accumulator[n].x[3] *= correction[1];
    }
    accumulate_weighted_rows<HeadCapacity>(accumulator, scores, value_tile);
  }
  if (!warp_has_rows) return;
  store_rows<HeadCapacity>(out + head.out_offset, problem.channels, first_query, accumulator, 1.0f / running_sum[0], 1.0f / running_sum[1],
                           problem);
  if (place.thread != 0) return;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int query = queries_of_lane[half];
    if (query < problem.sequence) logsumexp[head.statistics_offset + query] = running_max[half] + logf(running_sum[half]);
  }
}

// dK and dV of a block's 64 keys, over the staged queries from the block's first key on.
template <int HeadCapacity>
__global__ void __launch_bounds__(kMmaThreads) key_value_gradient_tf32_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                              const float* logsumexp, const float* row_dot, Problem problem) {
  using Tiles = MmaTiles<HeadCapacity>;
  FERRY_SHARED(float, query_tile, [kStagedRows][Tiles::stride]);
  FERRY_SHARED(float, dout_tile, [kStagedRows][Tiles::stride]);
  FERRY_SHARED(float, tile_logsumexp, [kStagedRows]);
  FERRY_SHARED(float, tile_row_dot, [kStagedRows]);
  const int block_tile = static_cast<int>(blockIdx.x);  // the first keys see the most queries: they start first
  const HeadView head = head_view(problem, static_cast<int>(blockIdx.y));
  const LanePlace place = lane_place();
  const int first_key = block_tile * kBlockRows + static_cast<int>(threadIdx.x) / kWarpSize * kWarpRows;
  const std::int64_t qkv_stride = 3 * static_cast<std::int64_t>(problem.channels);
  const float* queries = qkv + head.qkv_offset;
  const float* dout_rows = dout + head.out_offset;
  FragmentA key_rows[Tiles::steps], value_rows[Tiles::steps];
  load_row_fragments<HeadCapacity>(key_rows, queries + problem.channels, qkv_stride, first_key, problem);
  load_row_fragments<HeadCapacity>(value_rows, queries + 2 * problem.channels, qkv_stride, first_key, problem);

  FragmentC key_gradient[Tiles::steps] = {}, value_gradient[Tiles::steps] = {};
  const bool warp_has_rows = first_key < problem.sequence;
  for (int first_query = block_tile * kBlockRows; first_query < problem.sequence; first_query += kStagedRows) {
    __syncthreads();  // every warp is done with the previous queries
    stage_rows<HeadCapacity>(query_tile, queries, qkv_stride, first_query, problem);
    stage_rows<HeadCapacity>(dout_tile, dout_rows, problem.channels, first_query, problem);
    if (static_cast<int>(threadIdx.x) < kStagedRows) {
      const int query = first_query + static_cast<int>(threadIdx.x);
      const bool inside = query < problem.sequence;
      tile_logsumexp[threadIdx.x] = inside ? logsumexp[head.statistics_offset + query] : 0.0f;
      tile_row_dot[threadIdx.x] = inside ? row_dot[head.statistics_offset + query] : 0.0f;
    }
    __syncthreads();
    if (!warp_has_rows || first_query + kStagedRows <= first_key) continue;  // every staged query precedes the warp's keys
    FragmentC probabilities[kStagedTiles], score_gradients[kStagedTiles];  // [key][query]: transposed P and dS
    product_with_staged_rows<HeadCapacity>(probabilities, key_rows, query_tile);
    product_with_staged_rows<HeadCapacity>(score_gradients, value_rows, dout_tile);
#pragma unroll
    for (int n = 0; n < kStagedTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int column = 8 * n + 2 * place.thread + i % 2;
        const EntryGradient gradient = entry_gradient(problem, head, first_query + column, first_key + place.group + 8 * (i / 2),
                                                      probabilities[n].x[i], score_gradients[n].x[i], tile_logsumexp[column],
                                                      tile_row_dot[column]);
        probabilities[n].x[i] = gradient.dropped_probability;
        score_gradients[n].x[i] = gradient.score_gradient;
      }
    }
    accumulate_weighted_rows<HeadCapacity>(value_gradient, probabilities, dout_tile);  // dV = P_dropped^T dO
    accumulate_weighted_rows<HeadCapacity>(key_gradient, score_gradients, query_tile);  // dK = dS^T Q
  }
  if (!warp_has_rows) return;
  float* key_gradient_rows = dqkv + head.qkv_offset + problem.channels;
  store_rows<HeadCapacity>(key_gradient_rows, qkv_stride, first_key, key_gradient, 1.0f, 1.0f, problem);
  store_rows<HeadCapacity>(key_gradient_rows + problem.channels, qkv_stride, first_key, value_gradient, 1.0f, 1.0f, problem);
}

// dQ of a block's 64 queries, over the staged keys up to its last query.
template <int HeadCapacity>
__global__ void __launch_bounds__(kMmaThreads) query_gradient_tf32_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                          const float* logsumexp, const float* row_dot, Problem problem) {
  using Tiles = MmaTiles<HeadCapacity>;
  FERRY_SHARED(float, key_tile, [kStagedRows][Tiles::stride]);
  FERRY_SHARED(float, value_tile, [kStagedRows][Tiles::stride]);
  const QueryWarp warp = query_warp(qkv, problem);
  const HeadView& head = warp.head;
  const LanePlace& place = warp.place;
  const int first_query = warp.first_query;
  const int(&queries_of_lane)[2] = warp.queries_of_lane;
  FragmentA query_rows[Tiles::steps], dout_rows[Tiles::steps];
  load_row_fragments<HeadCapacity>(query_rows, warp.queries, warp.qkv_stride, first_query, problem);
  load_row_fragments<HeadCapacity>(dout_rows, dout + head.out_offset, problem.channels, first_query, problem);
  float row_logsumexp[2], row_dot_value[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool inside = queries_of_lane[half] < problem.sequence;
    row_logsumexp[half] = inside ? logsumexp[head.statistics_offset + queries_of_lane[half]] : 0.0f;
    row_dot_value[half] = inside ? row_dot[head.statistics_offset + queries_of_lane[half]] : 0.0f;
  }

  FragmentC query_gradient[Tiles::steps] = {};
  const bool warp_has_rows = first_query < problem.sequence;
  for (int first_key = 0; first_key <= warp.last_key; first_key += kStagedRows) {
    stage_keys_and_values<HeadCapacity>(key_tile, value_tile, warp, first_key, problem);
    if (!warp_has_rows || first_key > first_query) continue;  // in the future of every row of the warp
    FragmentC score_gradients[kStagedTiles], dout_values[kStagedTiles];
    product_with_staged_rows<HeadCapacity>(score_gradients, query_rows, key_tile);
    product_with_staged_rows<HeadCapacity>(dout_values, dout_rows, value_tile);
#pragma unroll
    for (int n = 0; n < kStagedTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int half = i / 2;
        score_gradients[n].x[i] = entry_gradient(problem, head, queries_of_lane[half], first_key + 8 * n + 2 * place.thread + i % 2,
                                                 score_gradients[n].x[i], dout_values[n].x[i], row_logsumexp[half], row_dot_value[half])
                                      .score_gradient;
      }
    }
    accumulate_weighted_rows<HeadCapacity>(query_gradient, score_gradients, key_tile);  // dQ = dS K
  }
  if (!warp_has_rows) return;
  store_rows<HeadCapacity>(dqkv + head.qkv_offset, warp.qkv_stride, first_query, query_gradient, 1.0f, 1.0f, problem);
}

template <int HeadCapacity>
void launch_forward(float* out, float* logsumexp, const float* qkv, const dim3& grid, const Problem& problem, cudaStream_t stream) {
  FERRY_LAUNCH_KERNEL(forward_tf32_kernel<HeadCapacity>, grid, kMmaThreads, 0, stream, out, logsumexp, qkv, problem);
}

template <int HeadCapacity>
void launch_backward(float* dqkv, const float* dout, const float* qkv, const float* logsumexp, const float* row_dot, const dim3& grid,
                     const Problem& problem, cudaStream_t stream) {
  FERRY_LAUNCH_KERNEL(key_value_gradient_tf32_kernel<HeadCapacity>, grid, kMmaThreads, 0, stream, dqkv, dout, qkv, logsumexp, row_dot,
                      problem);
  FERRY_LAUNCH_KERNEL(query_gradient_tf32_kernel<HeadCapacity>, grid, kMmaThreads, 0, stream, dqkv, dout, qkv, logsumexp, row_dot,
                      problem);
}

}  // namespace

void launch_tf32_forward(float* out, float* logsumexp, const float* qkv, const cpu::AttentionShape& shape, const Problem& problem,
                         cudaStream_t stream) {
  if (problem.head_size <= 64) launch_forward<64>(out, logsumexp, qkv, block_grid(shape), problem, stream);
  else launch_forward<128>(out, logsumexp, qkv, block_grid(shape), problem, stream);
}

void launch_tf32_backward(float* dqkv, const float* dout, const float* qkv, const float* logsumexp, const float* row_dot,
                          const cpu::AttentionShape& shape, const Problem& problem, cudaStream_t stream) {
  if (problem.head_size <= 64) launch_backward<64>(dqkv, dout, qkv, logsumexp, row_dot, block_grid(shape), problem, stream);
  else launch_backward<128>(dqkv, dout, qkv, logsumexp, row_dot, block_grid(shape), problem, stream);
}

}  // namespace ferry::cuda::flash
