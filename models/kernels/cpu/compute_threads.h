// The host kernels' compute resources: one thread count for OpenMP loops and OpenBLAS GEMMs, and the
// GEMM kernel family OpenBLAS picked for this CPU (it falls back to slow SSE3 "Prescott" kernels on
// CPUs it does not recognise, e.g. some virtual machines, even when AVX2 and FMA are present).
#pragma once

#include <string>

namespace ferry::cpu {

// threads > 0 sets both; 0 leaves the default (all cores). Negative is an error.
void set_compute_threads(int threads);
int compute_threads();

// OpenBLAS's kernel family, e.g. "Haswell", "SkylakeX", "Prescott".
std::string blas_core_name();
// The OPENBLAS_CORETYPE value that would give this CPU faster GEMMs than the one OpenBLAS picked
// when it fell back to a pre-AVX2 family on a newer CPU: "SkylakeX" with AVX-512 (F, BW, DQ, VL),
// "Haswell" with AVX2 and FMA), or empty when none would.
std::string better_blas_core();

}  // namespace ferry::cpu
