#include "models/kernels/cpu/compute_threads.h"

#include <cblas.h>
#include <omp.h>

#include <stdexcept>

namespace ferry::cpu {

void set_compute_threads(int threads) {
  if (threads < 0) throw std::invalid_argument("--threads must be >= 0 (0: all cores), got " + std::to_string(threads));
  if (threads == 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int compute_threads() { return omp_get_max_threads(); }

}  // namespace ferry::cpu
