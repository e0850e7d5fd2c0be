// Row-major GEMM through OpenBLAS for the host kernels, overloaded for float (sgemm) and double
// (dgemm) so templated kernels call one name: C = alpha * op(A) x op(B) + beta * C.
#pragma once

#include <cstdint>

namespace ferry::cpu {

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
          std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc);

}  // namespace ferry::cpu
