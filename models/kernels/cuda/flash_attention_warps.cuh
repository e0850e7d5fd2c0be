// How the tensor-core flash attention kernels (flash_attention_bf16.cu) split the work: a block's 4 warps each own 16 rows (queries for the forward and dQ, keys for dK and dV) held as mma
// fragments, and write them back from C fragments. Internal to models/kernels/cuda.
#pragma once

#include <algorithm>
#include <cstdint>

#include "models/kernels/cuda/flash_attention_problem.cuh"
#include "models/kernels/cuda/warp_mma.cuh"
#include "models/kernels/cuda/warp_reduce.cuh"

namespace ferry::cuda::flash {

// Warps per block (dev/attention_variants.sh builds other counts to time them; the engine is built with 4).
#ifndef FERRY_ATTENTION_WARPS
#define FERRY_ATTENTION_WARPS 4
#endif
inline constexpr int kWarps = FERRY_ATTENTION_WARPS;
inline constexpr int kMmaThreads = kWarps * kWarpSize;
inline constexpr int kWarpRows = 16;                   // a warp's rows: the m of mma
inline constexpr int kBlockRows = kWarps * kWarpRows;  // a block's queries (forward, dQ) or keys (dK, dV)

struct LanePlace {
  int group;   // lane / 4: a fragment's row (A, C) or column (B)
  int thread;  // lane % 4
};
__device__ inline LanePlace lane_place() {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  return {lane / 4, lane % 4};
}

// Writes a warp's 16 rows of a head-wide product held as HeadCapacity / 8 C fragments, each row times its
// scale (rows past the sequence and dimensions past the head skipped).
template <int HeadCapacity>
__device__ void store_rows(float* destination, std::int64_t row_stride, int first_row, const FragmentC (&rows)[HeadCapacity / 8],
                           float row_scale_low, float row_scale_high, const Problem& problem) {
  const LanePlace place = lane_place();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = first_row + place.group + 8 * half;
    if (row >= problem.sequence) continue;
    const float scale = half == 0 ? row_scale_low : row_scale_high;
#pragma unroll
    for (int n = 0; n < HeadCapacity / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int dimension = 8 * n + 2 * place.thread + e;
        if (dimension < problem.head_size) destination[row * row_stride + dimension] = rows[n].x[2 * half + e] * scale;
      }
    }
  }
}

// A forward or dQ warp's place: its 16 queries of one (batch, head), and the keys its block sees.
struct QueryWarp {
  HeadView head;
  LanePlace place;
  int first_query;         // of the warp's 16
  int queries_of_lane[2];  // the lane's rows: first_query + group, + 8
  int last_key;            // the block's last visible key
  std::int64_t qkv_stride;
  const float* queries;    // the head's q in qkv (its k at + C, v at + 2C)
};

// Blocks along x hold 16 queries a warp, the longest rows (the last queries) first; (batch, head) along y.
__device__ inline QueryWarp query_warp(const float* qkv, const Problem& problem) {
  const int block_tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const HeadView head = head_view(problem, static_cast<int>(blockIdx.y));
  const LanePlace place = lane_place();
  const int first_query = block_tile * kBlockRows + static_cast<int>(threadIdx.x) / kWarpSize * kWarpRows;
  return {head,
          place,
          first_query,
          {first_query + place.group, first_query + place.group + 8},
          std::min(block_tile * kBlockRows + kBlockRows, problem.sequence) - 1,
          3 * static_cast<std::int64_t>(problem.channels),
          qkv + head.qkv_offset};
}

// Blocks: kBlockRows rows of the sequence along x, (batch, head) along y.
inline dim3 block_grid(const cpu::AttentionShape& shape) {
  return dim3(static_cast<unsigned int>((shape.sequence + kBlockRows - 1) / kBlockRows), static_cast<unsigned int>(shape.batch * shape.heads));
}

}  // namespace ferry::cuda::flash
