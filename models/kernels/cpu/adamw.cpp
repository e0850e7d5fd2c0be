#include "models/kernels/cpu/adamw.h"

#include <cmath>
#include <vector>

#include "engine/core/dtype.h"

namespace ferry::cpu {

void adamw_update(float* parameter, std::uint16_t* parameter_bf16, const float* gradient, float* first_moment,
                  float* second_moment, std::int64_t count, const AdamWHyperparameters& hyperparameters,
                  std::int64_t step, float gradient_scale) {
  const float lr = hyperparameters.learning_rate;
  const float beta1 = hyperparameters.beta1;
  const float beta2 = hyperparameters.beta2;
  const float decay = 1.0f - lr * hyperparameters.weight_decay;
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const auto step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  const auto bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float epsilon = hyperparameters.epsilon;
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = gradient[i] * gradient_scale;
    float p = parameter[i] * decay;
    const float m = first_moment[i] * beta1 + (1.0f - beta1) * g;
    const float v = second_moment[i] * beta2 + (1.0f - beta2) * g * g;
    const float denominator = std::sqrt(v) / bias_correction2_sqrt + epsilon;
    p += -step_size * (m / denominator);
    first_moment[i] = m;
    second_moment[i] = v;
    parameter[i] = p;
  }
  if (parameter_bf16 != nullptr) convert_f32_to_bf16(parameter, parameter_bf16, static_cast<std::size_t>(count));
}

double sum_of_squares(const float* values, std::int64_t count) {
  constexpr std::int64_t kBlock = 1 << 16;
  const std::int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t last = (block + 1) * kBlock < count ? (block + 1) * kBlock : count;
    double sum = 0;
    for (std::int64_t i = block * kBlock; i < last; ++i) sum += static_cast<double>(values[i]) * values[i];
    partial[static_cast<std::size_t>(block)] = sum;
  }
  double total = 0;
  for (double each : partial) total += each;
  return total;
}

}  // namespace ferry::cpu
