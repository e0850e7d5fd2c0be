// Test helper for dry-run exactness: a device with a 1 GiB limit (a meta one allocating what `kernels`'
// kernels would), and the allocator statistics after one training micro-batch of a fresh model on it.
#pragma once

#include <memory>
#include <vector>

#include "engine/core/device.h"
#include "models/gpt_model.h"
#include "models/kernel_backend.h"
#include "tests/models/random_tokens.h"

namespace ferry::testing {

inline std::unique_ptr<Device> gibibyte_device(DeviceKind kind, DeviceKind kernels = DeviceKind::cpu) {
  DeviceOptions options;
  options.kind = kind;
  options.memory_limit = std::size_t{1} << 30;
  // A meta device standing in for another kind allocates with that kind's allocator settings (cuda:
  // fixed segments), as a dry run of its plan does.
  options.allocator_config = with_device_defaults(AllocatorConfig{}, kind == DeviceKind::meta ? kernels : kind);
  options.meta_target = kernels;
  std::unique_ptr<Device> device = create_device(options);
  if (kind == DeviceKind::meta) ops::stand_in_for(*device, kernels);
  return device;
}

// Tokens and targets are random_tokens with seeds 1 and 2; vocab_slice 0 keeps the model's automatic slice.
inline AllocatorStatistics micro_batch_statistics(Device& device, const GptConfig& config, DType dtype, GptDropout dropout,
                                                  const std::vector<ActivationKeep>& keeps, std::int64_t batch, std::int64_t sequence,
                                                  std::int64_t vocab_slice = 0) {
  GptModel model(device, config, dtype, dropout);
  if (vocab_slice > 0) model.set_vocab_slice(vocab_slice);
  model.zero_gradients();
  model.train_micro_batch(random_tokens(device, 1, batch, sequence, config.vocab), random_tokens(device, 2, batch, sequence, config.vocab),
                          MicroBatchKey{}, 1.0f, keeps);
  device.synchronize();
  return device.allocator().statistics();
}

}  // namespace ferry::testing
