// CpuAdam: the AdamW step over fp32 master weights, moments and gradients in host memory, as
// ZeRO-Offload runs it: SIMD chosen at run time, tiles spread over worker threads bound to cores with
// hwloc, the gradient scale (loss-scale undo and clipping) fused, and the updated parameter written in
// the device's dtype straight into a (pinned) staging buffer for the copy back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "engine/core/adamw_hyperparameters.h"
#include "engine/core/dtype.h"
#include "offload/simd_level.h"

namespace ferry::offload {

using AdamWSettings = AdamWHyperparameters;

// One contiguous run of elements stepped with the same settings.
struct AdamWSpan {
  float* master = nullptr;             // fp32 master weights, updated in place
  float* first_moment = nullptr;       // exp_avg
  float* second_moment = nullptr;      // exp_avg_sq
  const float* gradient = nullptr;     // fp32 gradients, before gradient_scale
  void* parameter_out = nullptr;       // null, or receives the updated parameters in parameter_dtype
  DType parameter_dtype = DType::f32;  // f32, bf16 (round to nearest even) or f16 (IEEE rounding)
  std::int64_t count = 0;
  bool decay = true;  // weight decay applies (2-D weights); false for biases and LayerNorm
};

struct GradientCheck {
  double sum_of_squares = 0;  // of gradient * unscale, accumulated in f64
  bool finite = true;         // no inf or NaN among gradient * unscale
};

struct CpuAdamOptions {
  int threads = 0;                 // 0: one per core of the process's CPU set
  std::optional<SimdLevel> simd;   // unset: best_simd_level()
  std::int64_t tile_elements = std::int64_t{1} << 16;  // elements per unit of work
  bool bind_threads = true;        // bind worker i to one core with hwloc
};

class CpuAdam {
 public:
  // Throws std::invalid_argument when options.simd is not supported here or threads < 0.
  explicit CpuAdam(CpuAdamOptions options = {});
  ~CpuAdam();
  CpuAdam(const CpuAdam&) = delete;
  CpuAdam& operator=(const CpuAdam&) = delete;

  int threads() const;
  SimdLevel simd() const;

  // Sum of squares (f64 per fixed tile, tiles summed in order) and finiteness of gradient * unscale:
  // the same result for any thread count.
  GradientCheck check_gradients(std::span<const float> gradient, float unscale) const;

  // One AdamW step (steps count from 1; the bias corrections come from beta^step, so a run resumed at
  // step k continues exactly). Each gradient is multiplied by gradient_scale first. The arithmetic is
  // torch.optim.AdamW's in f32 with one operation order on every SIMD level and no fused multiply-add
  // (the same as models/kernels/cpu/adamw.cpp): every level and thread count gives identical bits.
  void step(std::span<const AdamWSpan> spans, const AdamWSettings& settings, std::int64_t step, float gradient_scale);

 private:
  struct Workers;
  std::unique_ptr<Workers> workers_;
  SimdLevel simd_;
  std::int64_t tile_elements_;
};

}  // namespace ferry::offload
