#include "engine/cli/build_info.h"

#include "engine/comm/nccl_communicator.h"
#include "models/kernels/cpu/compute_threads.h"
#include "offload/simd_level.h"

namespace ferry {

std::string version_text() {
  std::string text = "ferry " FERRY_VERSION " (commit " + std::string(build_commit()) + ")\n";
#if defined(FERRY_CUDA_EMULATION)
  text += "CUDA: emulated on the host (tests/cuda_emulation, NCCL over MPI: a CI build for checking, no GPU)\n";
#elif defined(FERRY_HAVE_CUDA)
  text += "CUDA: yes (cuda device built with CUDA " FERRY_CUDA_VERSION ")\n";
#else
  text += "CUDA: no (a CPU-only build: --device cpu and meta)\n";
#endif
  text += "NCCL: " + describe_nccl_library() + "\n";
  text += "BLAS kernels: OpenBLAS " + cpu::blas_core_name() + "\n";
  text += "CpuAdam SIMD: " + std::string(offload::simd_level_name(offload::best_simd_level()));
  return text;
}

}  // namespace ferry
