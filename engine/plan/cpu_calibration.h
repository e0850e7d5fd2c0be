// The cpu device's compute rate for the planner's cost model, measured by timing ferry's own GEMM (the
// kernels a cpu step spends most of its time in) on this machine's cores: the figure `--cluster local`
// and cpu clusters divide FLOPs by.
#pragma once

namespace ferry {

// FLOP/s of an f32 GEMM of a transformer's shape (512 tokens x 768 -> 3072) on all cores, the best of a
// few timed repeats after a warm-up.
double measure_cpu_gemm_flops();

}  // namespace ferry
