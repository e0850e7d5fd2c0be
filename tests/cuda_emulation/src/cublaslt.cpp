// The emulated cuBLASLt (cuda_emulation/cublaslt_api.h): descriptors and layouts keep what matmul.cu
// sets (checked as cuBLASLt checks sizes and types), and cublasLtMatmul runs a host reference GEMM,
// D = alpha op(A) op(B) + beta C (+ bias, GELU or ReLU epilogue), column-major, batched by strides. Products
// accumulate in double and round once (cuBLAS accumulates in fp32 in an order of its own), and every
// matrix must lie inside one device allocation, so a wrong leading dimension or size fails.
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda_emulation/cublaslt_api.h"
#include "cuda_emulation/half_types.h"
#include "cuda_emulation/stream_work.h"
#include "device_memory.h"

struct cublasLtContext {
  int device = 0;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N;
  cublasOperation_t transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  std::uint64_t rows;
  std::uint64_t columns;
  std::int64_t leading_dimension;
  std::int32_t batch_count = 1;
  std::int64_t batch_stride = 0;
  std::int32_t order = 0;  // CUBLASLT_ORDER_COL; the only one emulated
};
struct cublasLtMatmulPreferenceOpaque_t {
  std::uint64_t max_workspace_bytes = 0;
  std::uint32_t minimum_alignment[4] = {256, 256, 256, 256};
};

namespace {

using ferry::cuda_emulation::DeviceMemory;

template <typename Value>
cublasStatus_t read_attribute(const void* buffer, std::size_t bytes, Value& value) {
  if (buffer == nullptr || bytes != sizeof(Value)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&value, buffer, sizeof(Value));
  return CUBLAS_STATUS_SUCCESS;
}

std::size_t element_bytes(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
  }
  return 0;
}
bool emulated_type(cudaDataType_t type) { return type == CUDA_R_32F || type == CUDA_R_16BF || type == CUDA_R_16F; }

float load(const void* base, std::int64_t index, cudaDataType_t type) {
  switch (type) {
    case CUDA_R_16BF: return __bfloat162float(__nv_bfloat16{static_cast<const unsigned short*>(base)[index]});
    case CUDA_R_16F: return __half2float(__half{static_cast<const unsigned short*>(base)[index]});
    default: return static_cast<const float*>(base)[index];
  }
}
void store(void* base, std::int64_t index, cudaDataType_t type, float value) {
  switch (type) {
    case CUDA_R_16BF: static_cast<unsigned short*>(base)[index] = __float2bfloat16(value).__x; return;
    case CUDA_R_16F: static_cast<unsigned short*>(base)[index] = __float2half_rn(value).__x; return;
    default: static_cast<float*>(base)[index] = value; return;
  }
}

// An f32 operand as the tensor cores take it in TF32 mode: 10 mantissa bits, rounded to nearest, ties away
// from zero (cvt.rna.tf32.f32); infinities and NaNs pass unchanged.
float to_tf32(float value) {
  if (!std::isfinite(value)) return value;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  bits = (bits + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&value, &bits, sizeof(bits));
  return value;
}

// m, n, k of D = op(A) op(B), after the checks cuBLASLt makes on sizes, types and the epilogue.
struct ProductShape {
  std::int64_t m, n, k;
};
cublasStatus_t check(const cublasLtMatmulDescOpaque_t* descriptor, const cublasLtMatrixLayoutOpaque_t* a,
                     const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c, const cublasLtMatrixLayoutOpaque_t* d,
                     ProductShape& shape) {
  if (descriptor == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const bool tf32 = descriptor->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if ((descriptor->compute != CUBLAS_COMPUTE_32F && !tf32) || descriptor->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (tf32 && a->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;  // TF32 products take f32 matrices
  if (!emulated_type(a->type) || a->type != b->type || !emulated_type(d->type) || c->type != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  for (const auto* layout : {a, b, c, d}) {
    if (layout->order != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (layout->leading_dimension < static_cast<std::int64_t>(layout->rows)) return CUBLAS_STATUS_INVALID_VALUE;
    if (layout->batch_count != d->batch_count) return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool ta = descriptor->transa == CUBLAS_OP_T, tb = descriptor->transb == CUBLAS_OP_T;
  shape.m = static_cast<std::int64_t>(ta ? a->columns : a->rows);
  shape.k = static_cast<std::int64_t>(ta ? a->rows : a->columns);
  const auto k_of_b = static_cast<std::int64_t>(tb ? b->columns : b->rows);
  shape.n = static_cast<std::int64_t>(tb ? b->rows : b->columns);
  if (k_of_b != shape.k || static_cast<std::int64_t>(d->rows) != shape.m || static_cast<std::int64_t>(d->columns) != shape.n ||
      c->rows != d->rows || c->columns != d->columns) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasLtEpilogue_t epilogue = descriptor->epilogue;
  const bool with_bias = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  if (!with_bias && epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_GELU && epilogue != CUBLASLT_EPILOGUE_RELU) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (with_bias && descriptor->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// The matrix's elements (all batches) lie inside one device allocation.
bool inside_device_memory(const void* data, const cublasLtMatrixLayoutOpaque_t& layout) {
  if (layout.rows == 0 || layout.columns == 0) return true;
  const auto span = static_cast<std::uint64_t>(layout.leading_dimension) * (layout.columns - 1) + layout.rows +
                    static_cast<std::uint64_t>(layout.batch_count - 1) * static_cast<std::uint64_t>(layout.batch_stride);
  return DeviceMemory::instance().contains(data, span * element_bytes(layout.type));
}

float epilogue_activation(cublasLtEpilogue_t epilogue, float value) {
  if (epilogue == CUBLASLT_EPILOGUE_RELU || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) return value > 0.0f ? value : 0.0f;
  if (epilogue == CUBLASLT_EPILOGUE_GELU || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) {
    return 0.5f * value * (1.0f + std::tanh(0.7978845608028654f * (value + 0.044715f * value * value * value)));
  }
  return value;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported (by the emulation)";
    default: return "cuBLASLt emulation error";
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* descriptor, cublasComputeType_t compute_type, cudaDataType_t scale_type) {
  if (descriptor == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *descriptor = new cublasLtMatmulDescOpaque_t{compute_type, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t descriptor) {
  delete descriptor;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t descriptor, cublasLtMatmulDescAttributes_t attribute, const void* buffer,
                                              std::size_t bytes) {
  if (descriptor == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return read_attribute(buffer, bytes, descriptor->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return read_attribute(buffer, bytes, descriptor->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attribute(buffer, bytes, descriptor->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attribute(buffer, bytes, descriptor->bias);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, std::uint64_t rows, std::uint64_t columns,
                                          std::int64_t leading_dimension) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, columns, leading_dimension};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, const void* buffer,
                                                std::size_t bytes) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return read_attribute(buffer, bytes, layout->order);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return read_attribute(buffer, bytes, layout->batch_count);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return read_attribute(buffer, bytes, layout->batch_stride);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *preference = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buffer, std::size_t bytes) {
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return read_attribute(buffer, bytes, preference->max_workspace_bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return read_attribute(buffer, bytes, preference->minimum_alignment[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return read_attribute(buffer, bytes, preference->minimum_alignment[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return read_attribute(buffer, bytes, preference->minimum_alignment[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return read_attribute(buffer, bytes, preference->minimum_alignment[3]);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t descriptor, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  if (handle == nullptr || preference == nullptr || requested < 1 || results == nullptr || returned == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  ProductShape shape{};
  if (const cublasStatus_t status = check(descriptor, a, b, c, d, shape); status != CUBLAS_STATUS_SUCCESS) return status;
  // The reference GEMM needs no workspace and any element-aligned address: one "algorithm" always fits.
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t descriptor, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t d_layout,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  ferry::cuda_emulation::finish_deferred_work(stream);  // the product runs now: after what its stream deferred
  if (handle == nullptr || alpha == nullptr || beta == nullptr || algo == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace_bytes > 0 && !DeviceMemory::instance().contains(workspace, workspace_bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  ProductShape shape{};
  if (const cublasStatus_t status = check(descriptor, a_layout, b_layout, c_layout, d_layout, shape); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  const float alpha_value = *static_cast<const float*>(alpha), beta_value = *static_cast<const float*>(beta);
  if (!inside_device_memory(a, *a_layout) || !inside_device_memory(b, *b_layout) || !inside_device_memory(d, *d_layout) ||
      (beta_value != 0.0f && !inside_device_memory(c, *c_layout))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasLtEpilogue_t epilogue = descriptor->epilogue;
  const bool with_bias = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  if (with_bias && !DeviceMemory::instance().contains(descriptor->bias, static_cast<std::size_t>(shape.m) * element_bytes(d_layout->type))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool ta = descriptor->transa == CUBLAS_OP_T, tb = descriptor->transb == CUBLAS_OP_T;
  const bool tf32 = descriptor->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const auto operand = [tf32](const void* base, std::int64_t index, cudaDataType_t type) {
    const float value = load(base, index, type);
    return tf32 ? to_tf32(value) : value;
  };
  const auto [m, n, k] = shape;
  std::vector<double> left(static_cast<std::size_t>(m * k)), right(static_cast<std::size_t>(n * k));  // op(A) by rows, op(B) by columns
  for (std::int32_t batch = 0; batch < d_layout->batch_count; ++batch) {
    const std::int64_t a_base = batch * a_layout->batch_stride, b_base = batch * b_layout->batch_stride;
    const std::int64_t c_base = batch * c_layout->batch_stride, d_base = batch * d_layout->batch_stride;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t p = 0; p < k; ++p) {
        left[static_cast<std::size_t>(i * k + p)] = operand(a, a_base + (ta ? p + i * a_layout->leading_dimension : i + p * a_layout->leading_dimension), a_layout->type);
      }
    }
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t p = 0; p < k; ++p) {
        right[static_cast<std::size_t>(j * k + p)] = operand(b, b_base + (tb ? j + p * b_layout->leading_dimension : p + j * b_layout->leading_dimension), b_layout->type);
      }
    }
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t i = 0; i < m; ++i) {
        double sum = 0;
        const double* row = &left[static_cast<std::size_t>(i * k)];
        const double* column = &right[static_cast<std::size_t>(j * k)];
        for (std::int64_t p = 0; p < k; ++p) sum += row[p] * column[p];
        float value = alpha_value * static_cast<float>(sum);
        if (beta_value != 0.0f) value += beta_value * load(c, c_base + i + j * c_layout->leading_dimension, c_layout->type);
        if (with_bias) value += load(descriptor->bias, i, d_layout->type);
        store(d, d_base + i + j * d_layout->leading_dimension, d_layout->type, epilogue_activation(epilogue, value));
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
