#include "models/activation_memory.h"

namespace ferry {

std::int64_t block_activation_bytes(const GptConfig& config, std::int64_t batch, std::int64_t sequence,
                                    std::int64_t element_bytes, ActivationKeep keep) {
  const std::int64_t btc = batch * sequence * config.hidden;
  const std::int64_t statistics = 16 * batch * sequence;
  switch (keep) {
    case ActivationKeep::all:
      return 16 * btc * element_bytes + config.heads * batch * sequence * sequence * element_bytes + statistics;
    case ActivationKeep::selective: return 10 * btc * element_bytes + statistics;
    case ActivationKeep::input_only: return btc * element_bytes;
  }
  return 0;
}

double block_recompute_flops(const GptConfig& config, std::int64_t batch, std::int64_t sequence, ActivationKeep keep) {
  const auto tokens = static_cast<double>(batch * sequence);
  const auto C = static_cast<double>(config.hidden);
  const auto T = static_cast<double>(sequence);
  const double attention = 2.0 * tokens * 2.0 * T * C;      // Q K^T and P V, full T x T products
  const double matmuls = 2.0 * tokens * 12.0 * C * C;      // qkv, attention projection, fc, mlp projection
  switch (keep) {
    case ActivationKeep::all: return 0.0;
    case ActivationKeep::selective: return attention;  // (LayerNorm and GELU are elementwise, not counted)
    case ActivationKeep::input_only: return matmuls + attention;
  }
  return 0.0;
}

}  // namespace ferry
