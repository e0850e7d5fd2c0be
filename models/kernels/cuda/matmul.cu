#include "models/kernels/cuda/matmul.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/kernels/cuda/kernel_launch.h"

namespace ferry::cuda {

void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                  cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")");
}

CublasLtHandle::CublasLtHandle() { FERRY_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

CublasLtHandle::~CublasLtHandle() {
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

namespace {

// ---- cuBLASLt descriptors, destroyed when they go out of scope -------------------------------------

class MatmulDescriptor {
 public:
  explicit MatmulDescriptor(cublasComputeType_t compute) {
    FERRY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&descriptor_, compute, CUDA_R_32F));
  }
  ~MatmulDescriptor() { cublasLtMatmulDescDestroy(descriptor_); }
  MatmulDescriptor(const MatmulDescriptor&) = delete;
  MatmulDescriptor& operator=(const MatmulDescriptor&) = delete;

  template <typename Value>
  void set(cublasLtMatmulDescAttributes_t attribute, const Value& value) {
    FERRY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(descriptor_, attribute, &value, sizeof(value)));
  }
  cublasLtMatmulDesc_t get() const { return descriptor_; }

 private:
  cublasLtMatmulDesc_t descriptor_ = nullptr;
};

// A column-major matrix: leading dimension = rows when packed, else the distance between its columns.
class MatrixLayout {
 public:
  MatrixLayout(cudaDataType_t type, std::int64_t rows, std::int64_t columns, std::int64_t leading_dimension) {
    FERRY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, static_cast<std::uint64_t>(rows),
                                                  static_cast<std::uint64_t>(columns), leading_dimension));
  }
  ~MatrixLayout() { cublasLtMatrixLayoutDestroy(layout_); }
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;

  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

class MatmulPreference {
 public:
  MatmulPreference() { FERRY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference_)); }
  ~MatmulPreference() { cublasLtMatmulPreferenceDestroy(preference_); }
  MatmulPreference(const MatmulPreference&) = delete;
  MatmulPreference& operator=(const MatmulPreference&) = delete;

  template <typename Value>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const Value& value) {
    FERRY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference_, attribute, &value, sizeof(value)));
  }
  cublasLtMatmulPreference_t get() const { return preference_; }

 private:
  cublasLtMatmulPreference_t preference_ = nullptr;
};

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address, so the
// heuristic skips kernels that need more alignment than a view into a larger buffer has.
std::uint32_t address_alignment(const void* address) {
  const auto value = reinterpret_cast<std::uintptr_t>(address);
  std::uint32_t alignment = 256;
  while (alignment > 1 && value % alignment != 0) alignment /= 2;
  return alignment;
}

cudaDataType_t element_type(MatmulType type) { return type == MatmulType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }
cublasComputeType_t compute_type(MatmulType type) { return type == MatmulType::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; }

const char* type_name(cudaDataType_t type) { return type == CUDA_R_32F ? "f32" : "bf16"; }

// ---- one row-major product through cuBLASLt ------------------------------------------------------

struct RowMajorMatrix {
  const void* data;
  cudaDataType_t type;
  std::int64_t rows;
  std::int64_t columns;
  std::int64_t row_stride = 0;  // elements from one row to the next; 0: packed (columns)

  std::int64_t stride() const { return row_stride > 0 ? row_stride : columns; }
};

// out[m, n] = op(left) x op(right) + beta * out (+ bias[n] per column when bias is not null), every
// matrix row-major (any may be a view whose rows lie further apart than its columns: out_row_stride). A row-major [r, c] matrix is the column-major [c, r] matrix, its
// transpose, so cuBLASLt computes out^T = op(right)^T x op(left)^T: right is its A, left its B.
void row_major_product(const CublasLtHandle& handle, MatmulWorkspace workspace, const RowMajorMatrix& left,
                       bool transpose_left, const RowMajorMatrix& right, bool transpose_right, void* out,
                       cudaDataType_t out_type, float beta, const void* bias, cublasComputeType_t compute, cudaStream_t stream,
                       std::int64_t out_row_stride = 0) {
  const std::int64_t m = transpose_left ? left.columns : left.rows;
  const std::int64_t k = transpose_left ? left.rows : left.columns;
  const std::int64_t n = transpose_right ? right.rows : right.columns;
  if ((transpose_right ? right.columns : right.rows) != k) {
    throw std::logic_error("row_major_product: inner dimensions differ: " + std::to_string(k) + " and " +
                           std::to_string(transpose_right ? right.columns : right.rows));
  }

  MatmulDescriptor descriptor(compute);
  const cublasOperation_t operation_a = transpose_right ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t operation_b = transpose_left ? CUBLAS_OP_T : CUBLAS_OP_N;
  descriptor.set(CUBLASLT_MATMUL_DESC_TRANSA, operation_a);
  descriptor.set(CUBLASLT_MATMUL_DESC_TRANSB, operation_b);
  if (bias != nullptr) {
    // The bias has out's element type (the descriptor's default) and runs along out^T's rows.
    descriptor.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    descriptor.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }

  const MatrixLayout layout_a(right.type, right.columns, right.rows, right.stride());
  const MatrixLayout layout_b(left.type, left.columns, left.rows, left.stride());
  const MatrixLayout layout_out(out_type, n, m, out_row_stride > 0 ? out_row_stride : n);

  MatmulPreference preference;
  const std::uint64_t workspace_bytes = workspace.bytes;
  preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, address_alignment(right.data));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, address_alignment(left.data));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, address_alignment(out));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, address_alignment(out));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle.get(), descriptor.get(), layout_a.get(), layout_b.get(), layout_out.get(),
                                     layout_out.get(), preference.get(), 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    throw CudaError("cuBLASLt has no algorithm for out[" + std::to_string(m) + ", " + std::to_string(n) + "] (" +
                    type_name(out_type) + ") = " + (transpose_left ? "left^T" : "left") + " x " +
                    (transpose_right ? "right^T" : "right") + " (" + type_name(left.type) + "), k = " +
                    std::to_string(k) + (bias != nullptr ? ", bias epilogue" : "") + ", workspace " +
                    std::to_string(workspace.bytes) + " bytes");
  }
  cublas_check(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);

  const float alpha = 1.0f;
  FERRY_CUBLAS_CHECK(cublasLtMatmul(handle.get(), descriptor.get(), &alpha, right.data, layout_a.get(), left.data,
                                    layout_b.get(), &beta, out, layout_out.get(), out, layout_out.get(),
                                    &heuristic.algo, workspace.data, workspace.bytes, stream));
}

// ---- bias kernels ---------------------------------------------------------------------------------

__device__ float to_float(float value) { return value; }
__device__ float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

constexpr int kBroadcastThreads = 256;
constexpr std::int64_t kBroadcastMaxBlocks = 4096;

// out[row, column] = bias[column] for every row.
template <typename Element>
__global__ void broadcast_bias_kernel(Element* out, const Element* bias, std::int64_t rows, std::int64_t columns) {
  const std::int64_t count = rows * columns;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += step) {
    out[index] = bias[index % columns];
  }
}

constexpr int kColumnsPerBlock = 32;  // one warp across adjacent columns: coalesced reads
constexpr int kRowLanes = 16;         // threads per column, each summing every kRowLanes-th row

// dbias[column] += sum over rows of dout[row, column]. Lane y sums rows y, y + kRowLanes, ... in
// order, then lane 0 adds the lanes' sums in lane order: the same result on every run.
template <typename Element>
__global__ void add_column_sums_kernel(float* dbias, const Element* dout, std::int64_t rows, std::int64_t columns) {
  FERRY_SHARED(float, lane_sums, [kRowLanes][kColumnsPerBlock]);
  const std::int64_t column = static_cast<std::int64_t>(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  float sum = 0.0f;
  if (column < columns) {
    for (std::int64_t row = threadIdx.y; row < rows; row += kRowLanes) sum += to_float(dout[row * columns + column]);
  }
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < columns) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += lane_sums[lane][threadIdx.x];
    dbias[column] += total;
  }
}

template <typename Element>
void broadcast_bias(void* out, const void* bias, std::int64_t rows, std::int64_t columns, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned int>(
      std::min<std::int64_t>(blocks_for(rows * columns, kBroadcastThreads), kBroadcastMaxBlocks));
  FERRY_LAUNCH_KERNEL(broadcast_bias_kernel<Element>, blocks, kBroadcastThreads, 0, stream, static_cast<Element*>(out),
                      static_cast<const Element*>(bias), rows, columns);
}

template <typename Element>
void add_column_sums(void* dbias, const void* dout, std::int64_t rows, std::int64_t columns, cudaStream_t stream) {
  const dim3 threads(kColumnsPerBlock, kRowLanes);
  FERRY_LAUNCH_KERNEL(add_column_sums_kernel<Element>, blocks_for(columns, kColumnsPerBlock), threads, 0, stream, static_cast<float*>(dbias),
                      static_cast<const Element*>(dout), rows, columns);
}

// ---- argument checks ------------------------------------------------------------------------------

void require_sizes(const char* function, std::int64_t rows, std::int64_t in_features, std::int64_t out_features) {
  if (rows < 0 || in_features <= 0 || out_features <= 0) {
    throw std::invalid_argument(std::string(function) + ": sizes must be rows >= 0, in_features > 0 and " +
                                "out_features > 0; got rows " + std::to_string(rows) + ", in_features " +
                                std::to_string(in_features) + ", out_features " + std::to_string(out_features));
  }
}

void require_pointer(const char* function, const void* pointer, const char* name) {
  if (pointer == nullptr) throw std::invalid_argument(std::string(function) + ": " + name + " is null");
}

void require_workspace(const char* function, MatmulWorkspace workspace) {
  if (workspace.bytes > 0 && workspace.data == nullptr) {
    throw std::invalid_argument(std::string(function) + ": the workspace has " + std::to_string(workspace.bytes) +
                                " bytes but no data");
  }
}

void require_stride(const char* function, std::int64_t row_stride, std::int64_t columns) {
  if (row_stride < columns) {
    throw std::invalid_argument(std::string(function) + ": rows " + std::to_string(row_stride) + " elements apart cannot hold " +
                                std::to_string(columns) + " columns");
  }
}

constexpr std::uintptr_t kEpilogueBiasAlignment = 16;

}  // namespace

void matmul_forward(const CublasLtHandle& handle, MatmulWorkspace workspace, MatmulType type, void* out,
                    const void* inp, const void* weight, const void* bias, std::int64_t rows,
                    std::int64_t in_features, std::int64_t out_features, cpu::WeightLayout layout,
                    cudaStream_t stream) {
  const char* function = "cuda::matmul_forward";
  require_sizes(function, rows, in_features, out_features);
  require_workspace(function, workspace);
  if (rows == 0) return;
  require_pointer(function, out, "out");
  require_pointer(function, inp, "inp");
  require_pointer(function, weight, "weight");

  const cudaDataType_t element = element_type(type);
  const bool in_out = layout == cpu::WeightLayout::in_out;
  const RowMajorMatrix input{inp, element, rows, in_features};
  const RowMajorMatrix stored_weight{weight, element, in_out ? in_features : out_features,
                                     in_out ? out_features : in_features};

  const bool fuse_bias = bias != nullptr && reinterpret_cast<std::uintptr_t>(bias) % kEpilogueBiasAlignment == 0;
  float beta = 0.0f;
  if (bias != nullptr && !fuse_bias) {
    if (type != MatmulType::bf16) {
      broadcast_bias<float>(out, bias, rows, out_features, stream);
    } else {
      broadcast_bias<__nv_bfloat16>(out, bias, rows, out_features, stream);
    }
    beta = 1.0f;
  }
  row_major_product(handle, workspace, input, false, stored_weight, !in_out, out, element, beta,
                    fuse_bias ? bias : nullptr, compute_type(type), stream);
}

void matmul_backward(const CublasLtHandle& handle, MatmulWorkspace workspace, MatmulType type, void* dinp,
                     void* dweight, void* dbias, const void* dout, const void* inp, const void* weight,
                     std::int64_t rows, std::int64_t in_features, std::int64_t out_features,
                     cpu::WeightLayout layout, cudaStream_t stream) {
  const char* function = "cuda::matmul_backward";
  require_sizes(function, rows, in_features, out_features);
  require_workspace(function, workspace);
  if (rows == 0) return;
  if (dinp == nullptr && dweight == nullptr && dbias == nullptr) return;
  require_pointer(function, dout, "dout");

  const cudaDataType_t element = element_type(type);
  const bool in_out = layout == cpu::WeightLayout::in_out;
  const RowMajorMatrix output_gradient{dout, element, rows, out_features};

  if (dinp != nullptr) {
    require_pointer(function, weight, "weight");
    const RowMajorMatrix stored_weight{weight, element, in_out ? in_features : out_features,
                                       in_out ? out_features : in_features};
    // dinp[rows, in] = dout x W^T: W^T is the stored [in, out] transposed, or the stored [out, in] itself.
    row_major_product(handle, workspace, output_gradient, false, stored_weight, in_out, dinp, element, 0.0f, nullptr,
                      compute_type(type), stream);
  }
  if (dweight != nullptr) {
    require_pointer(function, inp, "inp");
    const RowMajorMatrix input{inp, element, rows, in_features};
    // Accumulated in f32 for both types: bf16 products are exact in fp32 and the sum stays there.
    if (in_out) {
      row_major_product(handle, workspace, input, true, output_gradient, false, dweight, CUDA_R_32F, 1.0f, nullptr,
                        compute_type(type), stream);
    } else {
      row_major_product(handle, workspace, output_gradient, true, input, false, dweight, CUDA_R_32F, 1.0f, nullptr,
                        compute_type(type), stream);
    }
  }
  if (dbias != nullptr) {
    if (type != MatmulType::bf16) {
      add_column_sums<float>(dbias, dout, rows, out_features, stream);
    } else {
      add_column_sums<__nv_bfloat16>(dbias, dout, rows, out_features, stream);
    }
  }
}

void lm_head_logits_bf16(const CublasLtHandle& handle, MatmulWorkspace workspace, float* logits, std::int64_t logits_stride, const void* inp,
                         const void* table, std::int64_t rows, std::int64_t channels, std::int64_t vocab, cudaStream_t stream) {
  const char* function = "cuda::lm_head_logits_bf16";
  require_sizes(function, rows, channels, vocab);
  require_workspace(function, workspace);
  if (rows == 0) return;
  require_pointer(function, logits, "logits");
  require_pointer(function, inp, "inp");
  require_pointer(function, table, "table");
  const RowMajorMatrix input{inp, CUDA_R_16BF, rows, channels};
  require_stride(function, logits_stride, vocab);
  // cuBLASLt takes its aligned kernels only for a vocabulary extent of a multiple of 8 (GPT-2's 50,257 took
  // an SM75 align1 kernel at a quarter of the speed): the table's first rows of a multiple of 8, then the rest.
  const std::int64_t aligned = vocab >= 8 ? vocab / 8 * 8 : vocab;
  for (const std::int64_t first : {std::int64_t{0}, aligned}) {
    const std::int64_t count = first == 0 ? aligned : vocab - aligned;
    if (count == 0) continue;
    const RowMajorMatrix table_rows{static_cast<const std::uint16_t*>(table) + first * channels, CUDA_R_16BF, count, channels};
    row_major_product(handle, workspace, input, false, table_rows, true, logits + first, CUDA_R_32F, 0.0f, nullptr, CUBLAS_COMPUTE_32F,
                      stream, logits_stride);
  }
}

void lm_head_backward_bf16(const CublasLtHandle& handle, MatmulWorkspace workspace, float* dinp, bool accumulate_input,
                           float* dtable_rows, const void* dlogits, std::int64_t dlogits_stride, const void* inp, const void* table_rows,
                           std::int64_t rows, std::int64_t channels, std::int64_t vocab, std::int64_t first, std::int64_t count,
                           cudaStream_t stream) {
  const char* function = "cuda::lm_head_backward_bf16";
  require_sizes(function, rows, channels, vocab);
  require_stride(function, dlogits_stride, vocab);
  require_workspace(function, workspace);
  if (first < 0 || count <= 0 || first + count > vocab) {
    throw std::invalid_argument(std::string(function) + ": table rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                ") are not inside a vocabulary of " + std::to_string(vocab));
  }
  if (rows == 0 || (dinp == nullptr && dtable_rows == nullptr)) return;
  require_pointer(function, dlogits, "dlogits");
  // The slice's columns of dlogits: a view whose rows lie dlogits_stride elements apart.
  const RowMajorMatrix gradient_columns{static_cast<const std::uint16_t*>(dlogits) + first, CUDA_R_16BF, rows, count, dlogits_stride};
  if (dinp != nullptr) {
    require_pointer(function, table_rows, "table_rows");
    const RowMajorMatrix slice_of_table{table_rows, CUDA_R_16BF, count, channels};
    row_major_product(handle, workspace, gradient_columns, false, slice_of_table, false, dinp, CUDA_R_32F, accumulate_input ? 1.0f : 0.0f,
                      nullptr, CUBLAS_COMPUTE_32F, stream);
  }
  if (dtable_rows != nullptr) {
    require_pointer(function, inp, "inp");
    const RowMajorMatrix input{inp, CUDA_R_16BF, rows, channels};
    row_major_product(handle, workspace, gradient_columns, true, input, false, dtable_rows, CUDA_R_32F, 1.0f, nullptr,
                      CUBLAS_COMPUTE_32F, stream);
  }
}

}  // namespace ferry::cuda
