// This machine's rates for the planner's cost model, measured with ferry's own code: the cpu device's
// GEMM rate (the kernels a cpu step spends most of its time in) on this machine's cores, the figure
// `--cluster local` and cpu clusters divide FLOPs by; and an NVMe directory's rate through ferry's
// NvmeStore (O_DIRECT, io_uring), what an optimizer on NVMe moves its state at.
#pragma once

#include <cstddef>
#include <string>

namespace ferry {

// FLOP/s of an f32 GEMM of a transformer's shape (512 tokens x 768 -> 3072) on all cores, the best of a
// few timed repeats after a warm-up.
double measure_cpu_gemm_flops();

// Bytes/s of writing `bytes` to a file in `directory` and reading them back through an NvmeStore (1 MiB
// chunks, 32 in flight, checksums on, as the optimizer's tier moves them): the slower direction. The
// file is removed. Throws offload::NvmeError where the directory cannot hold it.
double measure_nvme_bandwidth(const std::string& directory, std::size_t bytes = std::size_t{128} << 20);

}  // namespace ferry
