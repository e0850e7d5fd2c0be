// The flash attention kernels on the tensor cores with bf16 operands (mma.sync m16n8k16, f32 sums): the
// FlashAttention-2 algorithm of the fp32 kernels (flash_attention.cu) with q, k, v, dout, the probabilities
// and the score gradients rounded to bf16 where they enter a product, as autocast's
// scaled_dot_product_attention does; exponentials in base 2. f32 stays in memory. Staged rows live in shared memory as bf16 pairs,
// row-major or transposed, so that every B fragment is one 32-bit read and a product's C fragments are the
// next product's A fragments with no exchange between lanes. No atomics: results repeat bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "models/kernels/cuda/flash_attention_problem.cuh"
#include "models/kernels/cuda/flash_attention_warps.cuh"
#include "models/kernels/cuda/kernel_launch.h"
#include "models/kernels/cuda/warp_mma.cuh"

namespace ferry::cuda::flash {
namespace {

constexpr float kLog2E = 1.4426950408889634f;

// Sizes of a kernel's staged step: StagedRows rows of the other side, heads of up to HeadCapacity.
template <int HeadCapacity, int StagedRows>
struct Bf16Tiles {
  static_assert(HeadCapacity % 16 == 0 && StagedRows % 16 == 0);
  static constexpr int head_steps = HeadCapacity / 16;      // k-steps over the head (A fragments of a row block)
  static constexpr int head_tiles = HeadCapacity / 8;       // n-tiles of a head-wide result
  static constexpr int staged_tiles = StagedRows / 8;       // n-tiles of a product with the staged rows
  // Words (bf16 pairs) per row, padded by 4 words: the 32 lanes' reads of a B fragment hit 32 banks.
  static constexpr int row_words = HeadCapacity / 2 + 4;    // a staged row, dimensions paired
  static constexpr int column_words = StagedRows / 2 + 4;   // a dimension of the transposed tile, rows paired
};

// Staged rows as they are (row r, dimensions 2w and 2w + 1 in word w) and transposed (dimension d, rows 2w and
// 2w + 1 in word w).
template <int HeadCapacity, int StagedRows>
using RowTile = std::uint32_t[StagedRows][Bf16Tiles<HeadCapacity, StagedRows>::row_words];
template <int HeadCapacity, int StagedRows>
using ColumnTile = std::uint32_t[HeadCapacity][Bf16Tiles<HeadCapacity, StagedRows>::column_words];

// Each kernel's shared memory, 16-byte aligned for ldmatrix (every tile's rows are multiples of 16 bytes).
template <int HeadCapacity, int StagedRows>
struct alignas(16) ForwardShared {
  RowTile<HeadCapacity, StagedRows> keys;
  ColumnTile<HeadCapacity, StagedRows> values;
};
template <int HeadCapacity, int StagedRows>
struct alignas(16) KeyValueGradientShared {
  RowTile<HeadCapacity, StagedRows> queries, douts;
  ColumnTile<HeadCapacity, StagedRows> query_columns, dout_columns;
  float logsumexp[StagedRows];  // base 2
  float row_dot[StagedRows];
};
template <int HeadCapacity, int StagedRows>
struct alignas(16) QueryGradientShared {
  RowTile<HeadCapacity, StagedRows> keys, values;
  ColumnTile<HeadCapacity, StagedRows> key_columns;
};

struct alignas(16) FourFloats {
  float x[4];
};

// Dimensions [dimension, dimension + 4) of a row, zero past the head; one 16-byte read where aligned.
__device__ inline FourFloats load_four(const float* row, int dimension, int head_size) {
  FourFloats values{};
  if (dimension + 4 <= head_size && (reinterpret_cast<std::uintptr_t>(row + dimension) & 15u) == 0) {
    return *reinterpret_cast<const FourFloats*>(row + dimension);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) values.x[i] = dimension + i < head_size ? row[dimension + i] : 0.0f;
  return values;
}

// Where a staged step reads: its source rows, and whether all of them lie inside the sequence and the head
// with 16-byte aligned rows (then every read is one unchecked 16-byte read).
struct StagedSource {
  const float* source;
  std::int64_t row_stride;
  int first_row;
  bool whole;
};

template <int HeadCapacity, int StagedRows>
__device__ inline StagedSource staged_source(const float* source, std::int64_t row_stride, int first_row, const Problem& problem) {
  const bool aligned = (reinterpret_cast<std::uintptr_t>(source) & 15u) == 0 && row_stride % 4 == 0;
  return {source, row_stride, first_row, aligned && problem.head_size == HeadCapacity && first_row + StagedRows <= problem.sequence};
}

// Dimensions [dimension, dimension + 4) of staged row `row`, zero past the sequence and the head.
__device__ inline FourFloats load_staged_four(const StagedSource& staged, int row, int dimension, const Problem& problem) {
  const int position = staged.first_row + row;
  const float* values = staged.source + position * staged.row_stride;
  if (staged.whole) return *reinterpret_cast<const FourFloats*>(values + dimension);
  return position < problem.sequence ? load_four(values, dimension, problem.head_size) : FourFloats{};
}

// tile = rows [first_row, first_row + StagedRows) of source in bf16, zero past the sequence and the head. Every
// read is issued before the first write, so one step waits for memory once.
template <int HeadCapacity, int StagedRows>
__device__ void stage_rows(RowTile<HeadCapacity, StagedRows>& tile, const float* source, std::int64_t row_stride, int first_row,
                           const Problem& problem) {
  constexpr int quads = HeadCapacity / 4, per_thread = StagedRows * quads / kMmaThreads;
  static_assert(StagedRows * quads % kMmaThreads == 0);
  const StagedSource staged = staged_source<HeadCapacity, StagedRows>(source, row_stride, first_row, problem);
  FourFloats values[per_thread];
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int element = static_cast<int>(threadIdx.x) + i * kMmaThreads;
    values[i] = load_staged_four(staged, element / quads, 4 * (element % quads), problem);
  }
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int element = static_cast<int>(threadIdx.x) + i * kMmaThreads, row = element / quads, quad = element % quads;
    tile[row][2 * quad] = pack_bf16x2(values[i].x[0], values[i].x[1]);
    tile[row][2 * quad + 1] = pack_bf16x2(values[i].x[2], values[i].x[3]);
  }
}

// A thread's share of a staged step read for the transposed tile: two adjacent rows at four dimensions, each
// of the warp's 32 lanes at the next pair of rows.
template <int HeadCapacity, int StagedRows>
struct RowPairs {
  static constexpr int pairs = StagedRows / 2, quads = HeadCapacity / 4, per_thread = pairs * quads / kMmaThreads;
  static_assert(pairs * quads % kMmaThreads == 0);
  FourFloats even[per_thread], odd[per_thread];
};

template <int HeadCapacity, int StagedRows>
__device__ void read_row_pairs(RowPairs<HeadCapacity, StagedRows>& values, const float* source, std::int64_t row_stride, int first_row,
                               const Problem& problem) {
  using Pairs = RowPairs<HeadCapacity, StagedRows>;
  const StagedSource staged = staged_source<HeadCapacity, StagedRows>(source, row_stride, first_row, problem);
#pragma unroll
  for (int i = 0; i < Pairs::per_thread; ++i) {
    const int element = static_cast<int>(threadIdx.x) + i * kMmaThreads, pair = element % Pairs::pairs, dimension = 4 * (element / Pairs::pairs);
    values.even[i] = load_staged_four(staged, 2 * pair, dimension, problem);
    values.odd[i] = load_staged_four(staged, 2 * pair + 1, dimension, problem);
  }
}

// columns = the rows read transposed, and rows (when given) as stage_rows writes them. The warp's 32 lanes
// write 32 consecutive words of a dimension.
template <int HeadCapacity, int StagedRows>
__device__ void write_row_pairs(ColumnTile<HeadCapacity, StagedRows>& columns, RowTile<HeadCapacity, StagedRows>* rows,
                                const RowPairs<HeadCapacity, StagedRows>& values) {
  using Pairs = RowPairs<HeadCapacity, StagedRows>;
  constexpr int pairs = Pairs::pairs, per_thread = Pairs::per_thread;
  const FourFloats(&even)[per_thread] = values.even;
  const FourFloats(&odd)[per_thread] = values.odd;
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int element = static_cast<int>(threadIdx.x) + i * kMmaThreads, pair = element % pairs, dimension = 4 * (element / pairs);
#pragma unroll
    for (int j = 0; j < 4; ++j) columns[dimension + j][pair] = pack_bf16x2(even[i].x[j], odd[i].x[j]);
    if (rows == nullptr) continue;
    std::uint32_t* even_row = (*rows)[2 * pair] + dimension / 2;
    std::uint32_t* odd_row = (*rows)[2 * pair + 1] + dimension / 2;
    even_row[0] = pack_bf16x2(even[i].x[0], even[i].x[1]), even_row[1] = pack_bf16x2(even[i].x[2], even[i].x[3]);
    odd_row[0] = pack_bf16x2(odd[i].x[0], odd[i].x[1]), odd_row[1] = pack_bf16x2(odd[i].x[2], odd[i].x[3]);
  }
}

// Both at once: a step staged as it is read.
template <int HeadCapacity, int StagedRows>
__device__ void stage_columns(ColumnTile<HeadCapacity, StagedRows>& columns, RowTile<HeadCapacity, StagedRows>* rows, const float* source,
                              std::int64_t row_stride, int first_row, const Problem& problem) {
  RowPairs<HeadCapacity, StagedRows> values;
  read_row_pairs<HeadCapacity, StagedRows>(values, source, row_stride, first_row, problem);
  write_row_pairs<HeadCapacity, StagedRows>(columns, rows, values);
}

// The B fragments of n-tiles n and n + 1 at k-step `step` from either tile, in one ldmatrix: row-major tiles
// give (k = dimension, n = staged row), transposed ones (k = staged row, n = dimension). Fragment register
// x[0] of n-tile m is word tile[8m + g][8 step + t], x[1] the word 4 further.
template <typename Tile>
__device__ inline void load_staged_fragments(Bf16FragmentB& first, Bf16FragmentB& second, const Tile& tile, int n, int step) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, matrix = lane / 8;
  std::uint32_t words[4];
  load_matrices_x4(words, tile[8 * (n + matrix / 2) + lane % 8] + 8 * step + 4 * (matrix % 2));
  first = {{words[0], words[1]}};
  second = {{words[2], words[3]}};
}

// A warp's rows [first_row, first_row + 16) of source as A fragments, one per 16 dimensions, read from global.
template <int HeadCapacity>
__device__ void load_row_fragments(Bf16FragmentA (&fragments)[HeadCapacity / 16], const float* source, std::int64_t row_stride,
                                   int first_row, const Problem& problem) {
  const LanePlace place = lane_place();
#pragma unroll
  for (int step = 0; step < HeadCapacity / 16; ++step) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = first_row + place.group + 8 * (i % 2), dimension = 16 * step + 2 * place.thread + 8 * (i / 2);
      const float* values = source + row * row_stride + dimension;
      const bool inside = row < problem.sequence;
      fragments[step].x[i] = pack_bf16x2(inside && dimension < problem.head_size ? values[0] : 0.0f,
                                         inside && dimension + 1 < problem.head_size ? values[1] : 0.0f);
    }
  }
}

// result[n] (16 x 8) = rows (16 x head) . staged rows [8n, 8n + 8)^T.
template <int HeadCapacity, int StagedRows>
__device__ void product_with_staged_rows(FragmentC (&result)[StagedRows / 8], const Bf16FragmentA (&rows)[HeadCapacity / 16],
                                         const RowTile<HeadCapacity, StagedRows>& tile) {
#pragma unroll
  for (int n = 0; n < StagedRows / 8; ++n) result[n] = FragmentC{};
#pragma unroll
  for (int step = 0; step < HeadCapacity / 16; ++step) {
#pragma unroll
    for (int n = 0; n < StagedRows / 8; n += 2) {
      Bf16FragmentB first, second;
      load_staged_fragments(first, second, tile, n, step);
      mma_bf16(result[n], rows[step], first);
      mma_bf16(result[n + 1], rows[step], second);
    }
  }
}

// accumulator (16 x head) += weights (16 x StagedRows, f32 C fragments rounded to bf16) . staged rows.
template <int HeadCapacity, int StagedRows>
__device__ void accumulate_weighted_rows(FragmentC (&accumulator)[HeadCapacity / 8], const FragmentC (&weights)[StagedRows / 8],
                                         const ColumnTile<HeadCapacity, StagedRows>& tile) {
#pragma unroll
  for (int step = 0; step < StagedRows / 16; ++step) {
    const Bf16FragmentA weight_fragment = c_pair_to_a_fragment(weights[2 * step], weights[2 * step + 1]);
#pragma unroll
    for (int n = 0; n < HeadCapacity / 8; n += 2) {
      Bf16FragmentB first, second;
      load_staged_fragments(first, second, tile, n, step);
      mma_bf16(accumulator[n], weight_fragment, first);
      mma_bf16(accumulator[n + 1], weight_fragment, second);
    }
  }
}

template <int HeadCapacity, int StagedRows>
__global__ void __launch_bounds__(kMmaThreads) forward_bf16_kernel(float* out, float* logsumexp, const float* qkv, Problem problem) {
  using Tiles = Bf16Tiles<HeadCapacity, StagedRows>;
  using Shared = ForwardShared<HeadCapacity, StagedRows>;
  FERRY_SHARED(Shared, shared, );
  auto& key_tile = shared.keys;
  auto& value_tile = shared.values;
  const QueryWarp warp = query_warp(qkv, problem);
  const HeadView& head = warp.head;
  const LanePlace& place = warp.place;
  const int first_query = warp.first_query;
  const int(&queries_of_lane)[2] = warp.queries_of_lane;
  Bf16FragmentA query_rows[Tiles::head_steps];
  load_row_fragments<HeadCapacity>(query_rows, warp.queries, warp.qkv_stride, first_query, problem);

  // Maxima of the raw dot products; exponentials in base 2: exp(scale (s - max)) = 2^(s log2_scale - max log2_scale).
  const float log2_scale = problem.scale * kLog2E;
  float running_max[2] = {-INFINITY, -INFINITY}, running_sum[2] = {0.0f, 0.0f};
  FragmentC accumulator[Tiles::head_tiles] = {};
  const bool warp_has_rows = first_query < problem.sequence;
  for (int first_key = 0; first_key <= warp.last_key; first_key += StagedRows) {
    __syncthreads();  // every warp is done with the previous keys and values
    stage_rows<HeadCapacity, StagedRows>(key_tile, warp.queries + problem.channels, warp.qkv_stride, first_key, problem);
    stage_columns<HeadCapacity, StagedRows>(value_tile, nullptr, warp.queries + 2 * problem.channels, warp.qkv_stride, first_key, problem);
    __syncthreads();
    // Staged steps start at multiples of StagedRows, warps' rows at multiples of 16: a step either starts at or
    // before the warp's first query (every row then sees its first key: finite maxima) or lies in its future.
    if (!warp_has_rows || first_key > first_query) continue;
    FragmentC scores[Tiles::staged_tiles];
    product_with_staged_rows<HeadCapacity, StagedRows>(scores, query_rows, key_tile);
    const bool masked = first_key + StagedRows - 1 > first_query || first_key + StagedRows > problem.sequence;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < Tiles::staged_tiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = first_key + 8 * n + 2 * place.thread + i % 2;
        if (masked && !(key <= queries_of_lane[i / 2] && key < problem.sequence)) scores[n].x[i] = -INFINITY;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], scores[n].x[i]);
      }
    }
    float new_max[2], correction[2], offset[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      new_max[half] = fmaxf(running_max[half], row_max<4>(tile_max[half]));
      correction[half] = fast_exp2((running_max[half] - new_max[half]) * log2_scale);  // 0 on the first step
      offset[half] = new_max[half] * log2_scale;
    }
#pragma unroll
    for (int n = 0; n < Tiles::staged_tiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // Up to the row's final normalization; masked entries (-inf) give 0.
        scores[n].x[i] = fast_exp2(fmaf(scores[n].x[i], log2_scale, -offset[i / 2]));
        tile_sum[i / 2] += scores[n].x[i];
      }
    }
    if (problem.dropout > 0.0f) {
#pragma unroll
      for (int n = 0; n < Tiles::staged_tiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = first_key + 8 * n + 2 * place.thread + i % 2;
          if (scores[n].x[i] > 0.0f) scores[n].x[i] *= dropout_factor(problem, head, queries_of_lane[i / 2], key);
        }
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      running_sum[half] = running_sum[half] * correction[half] + row_sum<4>(tile_sum[half]);  // of undropped probabilities
      running_max[half] = new_max[half];
    }
#pragma unroll
    for (int n = 0; n < Tiles::head_tiles; ++n) {
      accumulator[n].x[0] *= correction[0], accumulator[n].x[1] *= correction[0];
      accumulator[n].x[2] *= correction[1], accumulator[n].x[3] *= correction[1];
    }
    accumulate_weighted_rows<HeadCapacity, StagedRows>(accumulator, scores, value_tile);
  }
  if (!warp_has_rows) return;
  store_rows<HeadCapacity>(out + head.out_offset, problem.channels, first_query, accumulator, 1.0f / running_sum[0], 1.0f / running_sum[1],
                           problem);
  if (place.thread != 0) return;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int query = queries_of_lane[half];
    if (query < problem.sequence) logsumexp[head.statistics_offset + query] = problem.scale * running_max[half] + logf(running_sum[half]);
  }
}

// dK and dV of a block's keys (16 a warp), over the staged queries from the block's first key on.
template <int HeadCapacity, int StagedRows>
__global__ void __launch_bounds__(kMmaThreads) key_value_gradient_bf16_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                              const float* logsumexp, const float* row_dot, Problem problem) {
  using Tiles = Bf16Tiles<HeadCapacity, StagedRows>;
  using Shared = KeyValueGradientShared<HeadCapacity, StagedRows>;
  FERRY_SHARED(Shared, shared, );
  auto& query_tile = shared.queries;
  auto& query_columns = shared.query_columns;
  auto& dout_tile = shared.douts;
  auto& dout_columns = shared.dout_columns;
  auto& tile_logsumexp = shared.logsumexp;
  auto& tile_row_dot = shared.row_dot;
  const int block_tile = static_cast<int>(blockIdx.x);  // the first keys see the most queries: they start first
  const HeadView head = head_view(problem, static_cast<int>(blockIdx.y));
  const LanePlace place = lane_place();
  const int first_key = block_tile * kBlockRows + static_cast<int>(threadIdx.x) / kWarpSize * kWarpRows;
  const std::int64_t qkv_stride = 3 * static_cast<std::int64_t>(problem.channels);
  const float* queries = qkv + head.qkv_offset;
  const float* dout_rows = dout + head.out_offset;
  Bf16FragmentA key_rows[Tiles::head_steps], value_rows[Tiles::head_steps];
  load_row_fragments<HeadCapacity>(key_rows, queries + problem.channels, qkv_stride, first_key, problem);
  load_row_fragments<HeadCapacity>(value_rows, queries + 2 * problem.channels, qkv_stride, first_key, problem);

  const float log2_scale = problem.scale * kLog2E;
  FragmentC key_gradient[Tiles::head_tiles] = {}, value_gradient[Tiles::head_tiles] = {};
  const bool warp_has_rows = first_key < problem.sequence;
  // Each step's queries, dout and row statistics are read during the step before (in registers), so a step
  // waits for memory only on the first.
  RowPairs<HeadCapacity, StagedRows> next_queries, next_douts;
  float next_logsumexp = 0.0f, next_row_dot = 0.0f;
  const auto read_step = [&](int first_query) {
    read_row_pairs<HeadCapacity, StagedRows>(next_queries, queries, qkv_stride, first_query, problem);
    read_row_pairs<HeadCapacity, StagedRows>(next_douts, dout_rows, problem.channels, first_query, problem);
    const int query = first_query + static_cast<int>(threadIdx.x);
    if (static_cast<int>(threadIdx.x) < StagedRows && query < problem.sequence) {
      next_logsumexp = logsumexp[head.statistics_offset + query] * kLog2E;  // base 2
      next_row_dot = row_dot[head.statistics_offset + query];
    } else {
      next_logsumexp = next_row_dot = 0.0f;
    }
  };
  read_step(block_tile * kBlockRows);
  for (int first_query = block_tile * kBlockRows; first_query < problem.sequence; first_query += StagedRows) {
    __syncthreads();  // every warp is done with the previous queries
    write_row_pairs<HeadCapacity, StagedRows>(query_columns, &query_tile, next_queries);
    write_row_pairs<HeadCapacity, StagedRows>(dout_columns, &dout_tile, next_douts);
    if (static_cast<int>(threadIdx.x) < StagedRows) {
      tile_logsumexp[threadIdx.x] = next_logsumexp;
      tile_row_dot[threadIdx.x] = next_row_dot;
    }
    __syncthreads();
    if (first_query + StagedRows < problem.sequence) read_step(first_query + StagedRows);
    if (!warp_has_rows || first_query + StagedRows <= first_key) continue;  // every staged query precedes the warp's keys
    FragmentC probabilities[Tiles::staged_tiles], score_gradients[Tiles::staged_tiles];  // [key][query]: transposed P and dS
    product_with_staged_rows<HeadCapacity, StagedRows>(probabilities, key_rows, query_tile);
    product_with_staged_rows<HeadCapacity, StagedRows>(score_gradients, value_rows, dout_tile);
#pragma unroll
    for (int n = 0; n < Tiles::staged_tiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int column = 8 * n + 2 * place.thread + i % 2;
        const float probability = fast_exp2(fmaf(probabilities[n].x[i], log2_scale, -tile_logsumexp[column]));
        const EntryGradient gradient = entry_gradient_of_probability(problem, head, first_query + column, first_key + place.group + 8 * (i / 2),
                                                                     probability, score_gradients[n].x[i], tile_row_dot[column]);
        probabilities[n].x[i] = gradient.dropped_probability;
        score_gradients[n].x[i] = gradient.score_gradient;
      }
    }
    accumulate_weighted_rows<HeadCapacity, StagedRows>(value_gradient, probabilities, dout_columns);  // dV = P_dropped^T dO
    accumulate_weighted_rows<HeadCapacity, StagedRows>(key_gradient, score_gradients, query_columns);  // dK = dS^T Q
  }
  if (!warp_has_rows) return;
  float* key_gradient_rows = dqkv + head.qkv_offset + problem.channels;
  store_rows<HeadCapacity>(key_gradient_rows, qkv_stride, first_key, key_gradient, 1.0f, 1.0f, problem);
  store_rows<HeadCapacity>(key_gradient_rows + problem.channels, qkv_stride, first_key, value_gradient, 1.0f, 1.0f, problem);
}

// dQ of a block's queries (16 a warp), over the staged keys up to its last query.
template <int HeadCapacity, int StagedRows>
__global__ void __launch_bounds__(kMmaThreads) query_gradient_bf16_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                          const float* logsumexp, const float* row_dot, Problem problem) {
  using Tiles = Bf16Tiles<HeadCapacity, StagedRows>;
  using Shared = QueryGradientShared<HeadCapacity, StagedRows>;
  FERRY_SHARED(Shared, shared, );
  auto& key_tile = shared.keys;
  auto& key_columns = shared.key_columns;
  auto& value_tile = shared.values;
  const QueryWarp warp = query_warp(qkv, problem);
  const HeadView& head = warp.head;
  const LanePlace& place = warp.place;
  const int first_query = warp.first_query;
  const int(&queries_of_lane)[2] = warp.queries_of_lane;
  Bf16FragmentA query_rows[Tiles::head_steps], dout_rows[Tiles::head_steps];
  load_row_fragments<HeadCapacity>(query_rows, warp.queries, warp.qkv_stride, first_query, problem);
  load_row_fragments<HeadCapacity>(dout_rows, dout + head.out_offset, problem.channels, first_query, problem);
  float row_logsumexp[2], row_dot_value[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool inside = queries_of_lane[half] < problem.sequence;
    row_logsumexp[half] = inside ? logsumexp[head.statistics_offset + queries_of_lane[half]] * kLog2E : 0.0f;  // base 2
    row_dot_value[half] = inside ? row_dot[head.statistics_offset + queries_of_lane[half]] : 0.0f;
  }

  const float log2_scale = problem.scale * kLog2E;
  FragmentC query_gradient[Tiles::head_tiles] = {};
  const bool warp_has_rows = first_query < problem.sequence;
  for (int first_key = 0; first_key <= warp.last_key; first_key += StagedRows) {
    __syncthreads();  // every warp is done with the previous keys and values
    const float* keys = warp.queries + problem.channels;
    stage_columns<HeadCapacity, StagedRows>(key_columns, &key_tile, keys, warp.qkv_stride, first_key, problem);
    stage_rows<HeadCapacity, StagedRows>(value_tile, keys + problem.channels, warp.qkv_stride, first_key, problem);
    __syncthreads();
    if (!warp_has_rows || first_key > first_query) continue;  // in the future of every row of the warp
    FragmentC score_gradients[Tiles::staged_tiles], dout_values[Tiles::staged_tiles];
    product_with_staged_rows<HeadCapacity, StagedRows>(score_gradients, query_rows, key_tile);
    product_with_staged_rows<HeadCapacity, StagedRows>(dout_values, dout_rows, value_tile);
#pragma unroll
    for (int n = 0; n < Tiles::staged_tiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int half = i / 2;
        const float probability = fast_exp2(fmaf(score_gradients[n].x[i], log2_scale, -row_logsumexp[half]));
        score_gradients[n].x[i] = entry_gradient_of_probability(problem, head, queries_of_lane[half],
                                                                first_key + 8 * n + 2 * place.thread + i % 2, probability,
                                                                dout_values[n].x[i], row_dot_value[half])
                                      .score_gradient;
      }
    }
    accumulate_weighted_rows<HeadCapacity, StagedRows>(query_gradient, score_gradients, key_columns);  // dQ = dS K
  }
  if (!warp_has_rows) return;
  store_rows<HeadCapacity>(dqkv + head.qkv_offset, warp.qkv_stride, first_query, query_gradient, 1.0f, 1.0f, problem);
}

// Staged rows per step: 64 in the forward; 32 in the backward (two products' scores are live at once), 16 at
// heads above 64 (their fragments take twice the registers). dev/attention_variants.sh builds other sizes
// (FERRY_ATTENTION_*_STAGED_ROWS) to time them beside these; the engine is built with these.
#ifndef FERRY_ATTENTION_FORWARD_STAGED_ROWS
#define FERRY_ATTENTION_FORWARD_STAGED_ROWS 64
#endif
#ifndef FERRY_ATTENTION_BACKWARD_STAGED_ROWS
#define FERRY_ATTENTION_BACKWARD_STAGED_ROWS 32
#endif
template <int HeadCapacity>
constexpr int kBackwardStagedRows =
    HeadCapacity <= 64 ? FERRY_ATTENTION_BACKWARD_STAGED_ROWS : std::max(16, FERRY_ATTENTION_BACKWARD_STAGED_ROWS / 2);
constexpr int kForwardStagedRows = FERRY_ATTENTION_FORWARD_STAGED_ROWS;

template <int HeadCapacity>
void launch_forward(float* out, float* logsumexp, const float* qkv, const dim3& grid, const Problem& problem, cudaStream_t stream) {
  FERRY_LAUNCH_KERNEL((forward_bf16_kernel<HeadCapacity, kForwardStagedRows>), grid, kMmaThreads, 0, stream, out, logsumexp, qkv, problem);
}

template <int HeadCapacity>
void launch_backward(float* dqkv, const float* dout, const float* qkv, const float* logsumexp, const float* row_dot, const dim3& grid,
                     const Problem& problem, cudaStream_t stream) {
  constexpr int staged = kBackwardStagedRows<HeadCapacity>;
  FERRY_LAUNCH_KERNEL((key_value_gradient_bf16_kernel<HeadCapacity, staged>), grid, kMmaThreads, 0, stream, dqkv, dout, qkv, logsumexp,
                      row_dot, problem);
  FERRY_LAUNCH_KERNEL((query_gradient_bf16_kernel<HeadCapacity, staged>), grid, kMmaThreads, 0, stream, dqkv, dout, qkv, logsumexp, row_dot,
                      problem);
}

}  // namespace

void launch_bf16_forward(float* out, float* logsumexp, const float* qkv, const cpu::AttentionShape& shape, const Problem& problem,
                         cudaStream_t stream) {
  if (problem.head_size <= 64) launch_forward<64>(out, logsumexp, qkv, block_grid(shape), problem, stream);
  else launch_forward<128>(out, logsumexp, qkv, block_grid(shape), problem, stream);
}

void launch_bf16_backward(float* dqkv, const float* dout, const float* qkv, const float* logsumexp, const float* row_dot,
                          const cpu::AttentionShape& shape, const Problem& problem, cudaStream_t stream) {
  if (problem.head_size <= 64) launch_backward<64>(dqkv, dout, qkv, logsumexp, row_dot, block_grid(shape), problem, stream);
  else launch_backward<128>(dqkv, dout, qkv, logsumexp, row_dot, block_grid(shape), problem, stream);
}

}  // namespace ferry::cuda::flash
