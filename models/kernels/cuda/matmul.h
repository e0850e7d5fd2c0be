// The cuBLASLt twin of the CPU matmul kernel (models/kernels/cpu/matmul.h): the same forward and
// backward on row-major matrices, in f32 or in bf16 with fp32 accumulation, queued on a stream, with a
// workspace the caller takes from the device allocator (nothing here allocates). Built only with CUDA.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "allocator/cuda_check.h"
#include "models/kernels/cpu/matmul.h"

namespace ferry::cuda {

// Throws ferry::CudaError naming the file, line, call and status when a cuBLASLt call fails.
void cublas_check(cublasStatus_t status, const char* call, const char* file, int line);

#define FERRY_CUBLAS_CHECK(call) ::ferry::cuda::cublas_check((call), #call, __FILE__, __LINE__)

// A cuBLASLt library context for the current device; create one per device and reuse it.
class CublasLtHandle {
 public:
  CublasLtHandle();
  ~CublasLtHandle();
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;

  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// What PyTorch gives cuBLASLt on Hopper; larger workspaces let the heuristic pick split-K kernels.
inline constexpr std::size_t kMatmulWorkspaceBytes = std::size_t{32} << 20;

// Scratch memory for cuBLASLt, allocated by the caller (MemoryCategory::workspace) and used only by
// work queued on the stream passed with it. bytes may be 0 (data null): fewer algorithms qualify.
struct MatmulWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// Element types. All accumulate in fp32.
//   f32:  every pointer is float; fp32 products (CUBLAS_COMPUTE_32F).
//   tf32: every pointer is float; the tensor cores' TF32 products (CUBLAS_COMPUTE_32F_FAST_TF32: operands
//         rounded to 10 mantissa bits, which bf16 and fp16 values keep exactly).
//   bf16: inp, weight, bias, out, dout and dinp hold bf16 bit patterns (std::uint16_t or
//         __nv_bfloat16); dweight and dbias are float, the fp32 master gradients.
enum class MatmulType : std::uint8_t { f32, bf16, tf32 };

// out[rows, out_features] = inp[rows, in_features] x W + bias (bias may be null), overwriting out.
// layout in_out: weight stored [in_features, out_features]; out_in: stored [out_features, in_features]
// and out = inp x weight^T. An aligned bias (16 bytes) is fused into the cuBLASLt epilogue; any other
// is broadcast into out first and the product added to it, as the CPU twin does.
void matmul_forward(const CublasLtHandle& handle, MatmulWorkspace workspace, MatmulType type, void* out,
                    const void* inp, const void* weight, const void* bias, std::int64_t rows,
                    std::int64_t in_features, std::int64_t out_features, cpu::WeightLayout layout,
                    cudaStream_t stream);

// dinp = dout x W^T (overwritten; may be null); dweight += inp^T x dout in the weight's layout (may be
// null); dbias += column sums of dout (may be null), summed in a fixed order (deterministic, no
// atomics). Calling it once for dinp and later for dweight and dbias gives the same results as one call.
void matmul_backward(const CublasLtHandle& handle, MatmulWorkspace workspace, MatmulType type, void* dinp,
                     void* dweight, void* dbias, const void* dout, const void* inp, const void* weight,
                     std::int64_t rows, std::int64_t in_features, std::int64_t out_features,
                     cpu::WeightLayout layout, cudaStream_t stream);

// The tied LM head on bf16 operands with f32 results, so no f32 copy of the table is ever made (the
// CPU twin is cpu::lm_head_* on the same values widened). table: [vocab, channels] bf16.
// logits[rows, vocab] (f32, rows logits_stride >= vocab floats apart: a stride of a multiple of 8 lets
// cuBLASLt take its aligned kernels) = inp[rows, channels] (bf16) x table^T.
void lm_head_logits_bf16(const CublasLtHandle& handle, MatmulWorkspace workspace, float* logits, std::int64_t logits_stride, const void* inp,
                         const void* table, std::int64_t rows, std::int64_t channels, std::int64_t vocab, cudaStream_t stream);

// Over the table's rows [first, first + count) (table_rows: those rows, bf16), with dlogits [rows, vocab]
// bf16 (rows dlogits_stride >= vocab apart): dinp[rows, channels] (f32) = dlogits[:, first:first+count] x table_rows (added to dinp when
// accumulate_input; dinp may be null), and dtable_rows[count, channels] (f32) += dlogits[:, first:first+
// count]^T x inp (may be null).
void lm_head_backward_bf16(const CublasLtHandle& handle, MatmulWorkspace workspace, float* dinp, bool accumulate_input,
                           float* dtable_rows, const void* dlogits, std::int64_t dlogits_stride, const void* inp, const void* table_rows,
                           std::int64_t rows, std::int64_t channels, std::int64_t vocab, std::int64_t first, std::int64_t count,
                           cudaStream_t stream);

}  // namespace ferry::cuda
