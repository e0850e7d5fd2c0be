// What would make a run fit: for a configuration that ran out of device memory, dry runs of the
// alternatives a user can reach for (each recompute policy, smaller micro-batches at the same tokens
// per step, optimizer offload) with the peak each predicts and the bytes it saves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/training_step.h"

namespace ferry {

struct MemoryOption {
  std::string flags;        // what to pass, e.g. "--checkpointing full" or "--batch 4 --grad-accum 2"
  std::int64_t peak_reserved = 0;  // predicted
  std::int64_t saved = 0;   // bytes of peak reserved saved against the failing configuration
  bool fits = false;
  std::string note;
};

struct MemoryAdvice {
  DryRun current;                     // the failing configuration
  std::vector<MemoryOption> options;  // most bytes saved first
};

MemoryAdvice advise_memory(const DryRunSetup& setup, std::size_t memory_limit);

// One alternative measured by a dry run, against the failing configuration.
MemoryOption memory_option(const std::string& flags, const DryRun& dry_run, const DryRun& current, std::size_t memory_limit);
// Those that fit first, then by the bytes they save.
void sort_memory_options(MemoryAdvice& advice);

// The advice as lines for an error message.
std::string describe_memory_advice(const MemoryAdvice& advice, std::size_t memory_limit);

}  // namespace ferry
