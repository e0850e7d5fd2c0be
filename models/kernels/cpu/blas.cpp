#include "models/kernels/cpu/blas.h"

#include <cblas.h>

namespace ferry::cpu {
namespace {

CBLAS_TRANSPOSE transpose(bool yes) { return yes ? CblasTrans : CblasNoTrans; }
blasint blas(std::int64_t value) { return static_cast<blasint>(value); }

}  // namespace

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose(transpose_a), transpose(transpose_b), blas(m), blas(n), blas(k), alpha, a, blas(lda), b,
              blas(ldb), beta, c, blas(ldc));
}

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
          std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transpose(transpose_a), transpose(transpose_b), blas(m), blas(n), blas(k), alpha, a, blas(lda), b,
              blas(ldb), beta, c, blas(ldc));
}

}  // namespace ferry::cpu
