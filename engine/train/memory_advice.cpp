#include "engine/train/memory_advice.h"

#include <algorithm>
#include <cstdio>

#include "allocator/byte_size.h"

namespace ferry {
MemoryOption memory_option(const std::string& flags, const DryRun& dry_run, const DryRun& current, std::size_t memory_limit) {
  return MemoryOption{flags, dry_run.peak_reserved, current.peak_reserved - dry_run.peak_reserved,
                      dry_run.peak_reserved <= static_cast<std::int64_t>(memory_limit), ""};
}

void sort_memory_options(MemoryAdvice& advice) {
  std::stable_sort(advice.options.begin(), advice.options.end(), [](const MemoryOption& a, const MemoryOption& b) {
    if (a.fits != b.fits) return a.fits;
    return a.saved > b.saved;
  });
}

MemoryAdvice advise_memory(const DryRunSetup& setup, std::size_t memory_limit) {
  MemoryAdvice advice;
  advice.current = dry_run_step(setup);
  const DryRun& current = advice.current;

  DryRunSetup variant = setup;
  // The least recompute that fits (what --checkpointing auto would take), then the overview's others
  // that lower the peak.
  const PolicyChoice cheapest = choose_recompute_policy(setup, memory_limit);
  std::vector<RecomputePolicy> policies = recompute_overview(setup.config.layers);
  if (cheapest.fits) policies.insert(policies.begin(), cheapest.policy);
  std::vector<std::string> shown;
  for (const RecomputePolicy& policy : policies) {
    if (policy.name() == setup.policy.name() || std::find(shown.begin(), shown.end(), policy.name()) != shown.end()) continue;
    shown.push_back(policy.name());
    variant.policy = policy;
    const DryRun dry_run = dry_run_step(variant);
    if (dry_run.peak_reserved < current.peak_reserved) {
      advice.options.push_back(memory_option("--checkpointing " + policy.name(), dry_run, current, memory_limit));
    }
  }
  // Smaller micro-batches, the same tokens per step; with full recompute too when that alone is short.
  for (const bool with_full_recompute : {false, true}) {
    variant = setup;
    if (with_full_recompute) variant.policy = RecomputePolicy::parse("full");
    for (std::int64_t batch = setup.settings.batch / 2; batch >= 1; batch /= 2) {
      if (setup.settings.batch % batch != 0) continue;
      variant.settings.batch = batch;
      variant.settings.grad_accum = setup.settings.grad_accum * (setup.settings.batch / batch);
      const DryRun dry_run = dry_run_step(variant);
      const std::string flags = (with_full_recompute ? "--checkpointing full " : "") + std::string("--batch ") + std::to_string(batch) +
                                " --grad-accum " + std::to_string(variant.settings.grad_accum);
      advice.options.push_back(memory_option(flags, dry_run, current, memory_limit));
      if (advice.options.back().fits) break;  // the largest micro-batch that fits is the one to take
    }
    if (std::any_of(advice.options.begin(), advice.options.end(), [](const MemoryOption& o) { return o.fits; })) break;
  }
  // ZeRO-Offload alone, then with full recompute: the optimizer states and whole gradients leave the device.
  if (!setup.offload_optimizer) {
    for (const bool with_full_recompute : {false, true}) {
      variant = setup;
      variant.offload_optimizer = true;
      if (with_full_recompute) variant.policy = RecomputePolicy::parse("full");
      const DryRun dry_run = dry_run_step(variant);
      advice.options.push_back(memory_option((with_full_recompute ? "--checkpointing full " : "") + std::string("--offload-optimizer cpu"),
                                           dry_run, current, memory_limit));
      if (advice.options.back().fits) break;
    }
  }
  // Offloaded: smaller gradient buckets; 16-bit weights: smaller f32 copies for the matmuls; then both.
  // Each halves from the largest weight (the default) down to one row; those that lower the peak are
  // shown, and the largest that fits ends the search. (The reserved peak need not fall monotonically:
  // other sizes of blocks cache differently.)
  const std::int64_t largest_weight = 4 * setup.config.hidden * setup.config.hidden;
  const bool sixteen_bit = setup.dtype != DType::f32;
  for (const auto& [buckets, copies] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    if ((buckets && !setup.offload_optimizer) || (copies && !sixteen_bit)) continue;
    for (std::int64_t elements = largest_weight / 2; elements >= setup.config.hidden; elements /= 2) {
      variant = setup;
      std::string flags;
      if (buckets) {
        variant.gradient_bucket_elements = std::min(elements, setup.gradient_bucket_elements > 0 ? setup.gradient_bucket_elements : elements);
        flags += "--reduce-bucket-size " + std::to_string(variant.gradient_bucket_elements);
      }
      if (copies) {
        variant.weight_copy_elements = std::min(elements, setup.weight_copy_elements > 0 ? setup.weight_copy_elements : elements);
        flags += std::string(flags.empty() ? "" : " ") + "--weight-copy-elements " + std::to_string(variant.weight_copy_elements);
      }
      const DryRun dry_run = dry_run_step(variant);
      if (dry_run.peak_reserved >= current.peak_reserved) continue;
      advice.options.push_back(memory_option(flags, dry_run, current, memory_limit));
      if (advice.options.back().fits) break;
    }
    if (std::any_of(advice.options.begin(), advice.options.end(), [](const MemoryOption& o) { return o.fits; })) break;
  }
  sort_memory_options(advice);
  return advice;
}

std::string describe_memory_advice(const MemoryAdvice& advice, std::size_t memory_limit) {
  const std::string allocated = advice.current.peak_allocated > 0  // a pipeline's advice measures reserved bytes only
                                    ? " (" + format_bytes(static_cast<std::size_t>(advice.current.peak_allocated)) + " allocated)"
                                    : std::string();
  std::string text = "a dry run of this configuration peaks at " + format_bytes(static_cast<std::size_t>(advice.current.peak_reserved)) +
                     " reserved" + allocated + " against the limit of " + format_bytes(memory_limit) + "; what would help, predicted by dry runs:";
  for (const MemoryOption& option : advice.options) {
    char line[256];
    std::snprintf(line, sizeof line, "\n  %-42s peak reserved %10s, saves %10s%s", option.flags.c_str(),
                  format_bytes(static_cast<std::size_t>(std::max<std::int64_t>(option.peak_reserved, 0))).c_str(),
                  format_bytes(static_cast<std::size_t>(std::max<std::int64_t>(option.saved, 0))).c_str(),
                  option.fits ? "  fits" : "  does not fit");
    text += line;
    if (!option.note.empty()) text += " (" + option.note + ")";
  }
  if (advice.options.empty()) text += "\n  nothing tried saves memory; raise --device-memory";
  return text;
}

}  // namespace ferry
