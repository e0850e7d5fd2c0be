#include "offload/cpu_adam.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "offload/cpu_adam_kernels.h"
#include "offload/host_thread_pool.h"

namespace ferry::offload {
namespace {

using AdamWKernel = void (*)(const kernels::AdamWTile&, const kernels::AdamWConstants&);
using SumOfSquaresKernel = double (*)(const float*, std::int64_t, float);

AdamWKernel adamw_kernel(SimdLevel level) {
  switch (level) {
#if defined(FERRY_OFFLOAD_X86_KERNELS)
    case SimdLevel::avx512: return kernels::adamw_tile_avx512;
    case SimdLevel::avx2: return kernels::adamw_tile_avx2;
#else
    case SimdLevel::avx512:
    case SimdLevel::avx2:
#endif
    case SimdLevel::scalar: break;
  }
  return kernels::adamw_tile_scalar;
}

SumOfSquaresKernel sum_of_squares_kernel(SimdLevel level) {
  switch (level) {
#if defined(FERRY_OFFLOAD_X86_KERNELS)
    case SimdLevel::avx512: return kernels::sum_of_squares_tile_avx512;
    case SimdLevel::avx2: return kernels::sum_of_squares_tile_avx2;
#else
    case SimdLevel::avx512:
    case SimdLevel::avx2:
#endif
    case SimdLevel::scalar: break;
  }
  return kernels::sum_of_squares_tile_scalar;
}

kernels::ParameterOutput parameter_output(const AdamWSpan& span) {
  if (span.parameter_out == nullptr) return kernels::ParameterOutput::none;
  switch (span.parameter_dtype) {
    case DType::f32: return kernels::ParameterOutput::f32;
    case DType::bf16: return kernels::ParameterOutput::bf16;
    case DType::f16: return kernels::ParameterOutput::f16;
    default: break;
  }
  throw std::invalid_argument("CpuAdam::step: parameter_dtype must be f32, bf16 or f16, got " +
                              std::string(dtype_name(span.parameter_dtype)));
}

void check_span(const AdamWSpan& span) {
  if (span.count < 0) throw std::invalid_argument("CpuAdam::step: a span has a negative count");
  if (span.count > 0 && (span.master == nullptr || span.first_moment == nullptr || span.second_moment == nullptr ||
                         span.gradient == nullptr)) {
    throw std::invalid_argument("CpuAdam::step: a span with elements has a null master, moment or gradient");
  }
}

// One unit of work: elements [begin, begin + count) of spans[span].
struct Tile {
  std::size_t span = 0;
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

}  // namespace

struct CpuAdam::Workers {
  Workers(int threads, bool bind_threads) : pool(threads, bind_threads) {}
  HostThreadPool pool;
  std::vector<Tile> tiles;  // step's scratch list, kept to avoid reallocating every step
};

CpuAdam::CpuAdam(CpuAdamOptions options)
    : simd_(options.simd.value_or(best_simd_level())), tile_elements_(options.tile_elements) {
  if (options.threads < 0) {
    throw std::invalid_argument("CpuAdam: threads must be >= 0 (0: one per core), got " + std::to_string(options.threads));
  }
  if (!simd_level_supported(simd_)) {
    throw std::invalid_argument("CpuAdam: SIMD level " + std::string(simd_level_name(simd_)) +
                                " is not supported by this CPU, OS or build");
  }
  if (tile_elements_ <= 0) {
    throw std::invalid_argument("CpuAdam: tile_elements must be positive, got " + std::to_string(tile_elements_));
  }
  workers_ = std::make_unique<Workers>(options.threads, options.bind_threads);
}

CpuAdam::~CpuAdam() = default;

int CpuAdam::threads() const { return workers_->pool.threads(); }
SimdLevel CpuAdam::simd() const { return simd_; }

GradientCheck CpuAdam::check_gradients(std::span<const float> gradient, float unscale) const {
  const auto count = static_cast<std::int64_t>(gradient.size());
  const std::int64_t tiles = (count + tile_elements_ - 1) / tile_elements_;
  std::vector<double> sums(static_cast<std::size_t>(tiles), 0.0);
  const SumOfSquaresKernel kernel = sum_of_squares_kernel(simd_);
  const float* data = gradient.data();
  const std::int64_t tile_elements = tile_elements_;
  workers_->pool.run(tiles, [&](std::int64_t tile) {
    const std::int64_t begin = tile * tile_elements;
    const std::int64_t length = std::min(tile_elements, count - begin);
    sums[static_cast<std::size_t>(tile)] = kernel(data + begin, length, unscale);
  });
  GradientCheck check;
  for (double sum : sums) check.sum_of_squares += sum;  // in tile order: independent of the threads
  check.finite = std::isfinite(check.sum_of_squares);   // see sum_of_squares_tile_* on why this suffices
  return check;
}

void CpuAdam::step(std::span<const AdamWSpan> spans, const AdamWSettings& settings, std::int64_t step,
                   float gradient_scale) {
  if (step < 1) throw std::invalid_argument("CpuAdam::step: steps count from 1, got " + std::to_string(step));
  std::vector<kernels::ParameterOutput> outputs;
  outputs.reserve(spans.size());
  for (const AdamWSpan& span : spans) {
    check_span(span);
    outputs.push_back(parameter_output(span));
  }

  // The same f32/f64 arithmetic as models/kernels/cpu/adamw.cpp.
  const float lr = settings.learning_rate;
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(settings.beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(settings.beta2), static_cast<double>(step));
  kernels::AdamWConstants decaying;
  decaying.beta1 = settings.beta1;
  decaying.beta2 = settings.beta2;
  decaying.one_minus_beta1 = 1.0f - settings.beta1;
  decaying.one_minus_beta2 = 1.0f - settings.beta2;
  decaying.epsilon = settings.epsilon;
  decaying.decay = 1.0f - lr * settings.weight_decay;
  decaying.negative_step_size = -static_cast<float>(static_cast<double>(lr) / bias_correction1);
  decaying.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  decaying.gradient_scale = gradient_scale;
  kernels::AdamWConstants not_decaying = decaying;
  not_decaying.decay = 1.0f - lr * 0.0f;

  std::vector<Tile>& tiles = workers_->tiles;
  tiles.clear();
  for (std::size_t s = 0; s < spans.size(); ++s) {
    for (std::int64_t begin = 0; begin < spans[s].count; begin += tile_elements_) {
      tiles.push_back({s, begin, std::min(tile_elements_, spans[s].count - begin)});
    }
  }
  const AdamWKernel kernel = adamw_kernel(simd_);
  workers_->pool.run(static_cast<std::int64_t>(tiles.size()), [&](std::int64_t index) {
    const Tile& tile = tiles[static_cast<std::size_t>(index)];
    const AdamWSpan& span = spans[tile.span];
    kernels::AdamWTile work;
    work.master = span.master + tile.begin;
    work.first_moment = span.first_moment + tile.begin;
    work.second_moment = span.second_moment + tile.begin;
    work.gradient = span.gradient + tile.begin;
    work.output = outputs[tile.span];
    if (span.parameter_out != nullptr) {
      work.parameter_out = static_cast<unsigned char*>(span.parameter_out) +
                           tile.begin * static_cast<std::int64_t>(dtype_size(span.parameter_dtype));
    }
    work.count = tile.count;
    kernel(work, span.decay ? decaying : not_decaying);
  });
}

}  // namespace ferry::offload
