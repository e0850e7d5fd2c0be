// The emulated cuBLASLt's reference GEMM against sums written out here: transposes, leading dimensions
// wider than the rows, strided batches, the bias epilogue, and the checks that refuse a layout whose
// elements run past their device allocation.
#include <gtest/gtest.h>
#include <cublasLt.h>

#include <cstdint>
#include <vector>

namespace {

struct Matrix {
  std::int64_t rows, columns, leading_dimension;
};

class DeviceFloats {
 public:
  explicit DeviceFloats(const std::vector<float>& values) : count_(values.size()) {
    EXPECT_EQ(cudaMalloc(&data_, count_ * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), count_ * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(data_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  void* data() const { return data_; }
  std::vector<float> download() const {
    std::vector<float> values(count_);
    EXPECT_EQ(cudaMemcpy(values.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return values;
  }

 private:
  std::size_t count_;
  void* data_ = nullptr;
};

std::vector<float> ramp(std::size_t count, float scale) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = scale * static_cast<float>(static_cast<int>(i % 7) - 3);
  return values;
}

// D = A^T B + bias over 2 batches; A stored [k=3, m=2] with ld 4, B [k=3, n=2] with ld 3, D [m=2, n=2] ld 2.
TEST(EmulatedCublasLt, TransposedStridedBatchedProductWithBias) {
  const std::int64_t m = 2, n = 2, k = 3, lda = 4, ldb = 3, ldd = 2, batches = 2;
  const std::int64_t stride_a = lda * m, stride_b = ldb * n, stride_d = ldd * n;
  const std::vector<float> a = ramp(static_cast<std::size_t>(stride_a * batches), 0.5f), b = ramp(static_cast<std::size_t>(stride_b * batches), 2.0f);
  const std::vector<float> bias = {10.0f, 20.0f};
  const DeviceFloats a_gpu(a), b_gpu(b), d_gpu(std::vector<float>(static_cast<std::size_t>(stride_d * batches), 0.0f)), bias_gpu(bias);

  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t descriptor = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&descriptor, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const void* bias_pointer = bias_gpu.data();
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descriptor, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descriptor, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descriptor, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer, sizeof bias_pointer),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descriptor, CUBLASLT_MATMUL_DESC_TRANSB, &transpose, 2), CUBLAS_STATUS_INVALID_VALUE);  // wrong size

  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_d = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout_a, CUDA_R_32F, k, m, lda), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout_b, CUDA_R_32F, k, n, ldb), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout_d, CUDA_R_32F, m, n, ldd), CUBLAS_STATUS_SUCCESS);
  const std::int32_t batch_count = static_cast<std::int32_t>(batches);
  for (auto [layout, stride] : {std::pair{layout_a, stride_a}, std::pair{layout_b, stride_b}, std::pair{layout_d, stride_d}}) {
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch_count, sizeof batch_count), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), CUBLAS_STATUS_SUCCESS);
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasLtMatmulAlgo_t algo{};
  EXPECT_EQ(cublasLtMatmul(handle, descriptor, &alpha, a_gpu.data(), layout_a, b_gpu.data(), layout_b, &beta, d_gpu.data(), layout_d,
                           d_gpu.data(), layout_d, &algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> d = d_gpu.download();
  for (std::int64_t batch = 0; batch < batches; ++batch) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        float expected = bias[static_cast<std::size_t>(i)];
        for (std::int64_t p = 0; p < k; ++p) {
          expected += a[static_cast<std::size_t>(batch * stride_a + p + i * lda)] * b[static_cast<std::size_t>(batch * stride_b + p + j * ldb)];
        }
        EXPECT_EQ(d[static_cast<std::size_t>(batch * stride_d + i + j * ldd)], expected) << batch << " " << i << " " << j;
      }
    }
  }

  // A leading dimension that runs the last batch of A past its allocation (7 + 3 + 8 = 18 of 16 floats) is refused, not read.
  cublasLtMatrixLayout_t too_wide = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&too_wide, CUDA_R_32F, k, m, lda + 3), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(too_wide, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch_count, sizeof batch_count), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(too_wide, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride_a, sizeof stride_a), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(handle, descriptor, &alpha, a_gpu.data(), too_wide, b_gpu.data(), layout_b, &beta, d_gpu.data(), layout_d,
                           d_gpu.data(), layout_d, &algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // Inner dimensions that differ are refused by the heuristic too.
  cublasLtMatmulPreference_t preference = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, descriptor, layout_b, layout_b, layout_d, layout_d, preference, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);  // B^T B: [2, 3] x [3, 2]
  EXPECT_EQ(found, 1);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, descriptor, layout_d, layout_b, layout_d, layout_d, preference, 1, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);  // D^T B: k 2 against 3

  for (cublasLtMatrixLayout_t layout : {layout_a, layout_b, layout_d, too_wide}) cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatmulDescDestroy(descriptor);
  cublasLtDestroy(handle);
}

// CUBLAS_COMPUTE_32F_FAST_TF32 rounds each f32 operand to TF32's 10 mantissa bits (to nearest), as the
// tensor cores take them: 1 + 2^-12 x 1 gives 1, and 1 + 2^-10 (a TF32 value) stays; bf16 matrices are refused.
TEST(EmulatedCublasLt, Tf32ComputeRoundsOperandsToTenMantissaBits) {
  const float near_one = 1.0f + 0x1p-12f, tf32_value = 1.0f + 0x1p-10f;
  const DeviceFloats a({near_one, tf32_value}), b({1.0f}), d({0.0f, 0.0f});
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulAlgo_t algo{};
  const float alpha = 1.0f, beta = 0.0f;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_d = nullptr, layout_bf16 = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout_a, CUDA_R_32F, 2, 1, 2), CUBLAS_STATUS_SUCCESS);  // [m=2, k=1]
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout_b, CUDA_R_32F, 1, 1, 1), CUBLAS_STATUS_SUCCESS);  // [k=1, n=1]
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout_d, CUDA_R_32F, 2, 1, 2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout_bf16, CUDA_R_16BF, 2, 1, 2), CUBLAS_STATUS_SUCCESS);
  for (const cublasComputeType_t compute : {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32}) {
    cublasLtMatmulDesc_t descriptor = nullptr;
    ASSERT_EQ(cublasLtMatmulDescCreate(&descriptor, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmul(handle, descriptor, &alpha, a.data(), layout_a, b.data(), layout_b, &beta, d.data(), layout_d, d.data(),
                             layout_d, &algo, nullptr, 0, nullptr),
              CUBLAS_STATUS_SUCCESS);
    const std::vector<float> result = d.download();
    EXPECT_EQ(result[0], compute == CUBLAS_COMPUTE_32F ? near_one : 1.0f);
    EXPECT_EQ(result[1], tf32_value);
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) {
      EXPECT_EQ(cublasLtMatmul(handle, descriptor, &alpha, a.data(), layout_bf16, b.data(), layout_bf16, &beta, d.data(), layout_d, d.data(),
                               layout_d, &algo, nullptr, 0, nullptr),
                CUBLAS_STATUS_NOT_SUPPORTED);
    }
    cublasLtMatmulDescDestroy(descriptor);
  }
  for (cublasLtMatrixLayout_t layout : {layout_a, layout_b, layout_d, layout_bf16}) cublasLtMatrixLayoutDestroy(layout);
  cublasLtDestroy(handle);
}

}  // namespace
