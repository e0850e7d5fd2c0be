// The host kernels' thread count: OpenMP loops and OpenBLAS GEMMs use the same number of threads.
#pragma once

namespace ferry::cpu {

// threads > 0 sets both; 0 leaves the default (all cores). Negative is an error.
void set_compute_threads(int threads);
int compute_threads();

}  // namespace ferry::cpu
