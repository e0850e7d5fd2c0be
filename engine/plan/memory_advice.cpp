#include "engine/plan/memory_advice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "allocator/byte_size.h"
#include "engine/plan/cheapest_first.h"
#include "engine/plan/cpu_calibration.h"
#include "engine/plan/step_time_model.h"
#include "engine/train/rank_training.h"
#include "engine/train/training_step.h"
#include "schedule/recompute_policy.h"

namespace ferry {
namespace {

// Bucket or slice bounds from the largest weight (4 hidden^2) down, halving, at least one row of it.
std::vector<std::int64_t> halvings(std::int64_t start, std::int64_t floor, int most) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t size = start / 2; size >= floor && static_cast<int>(sizes.size()) < most; size /= 2) sizes.push_back(size);
  return sizes;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& part : parts) {
    if (part.empty()) continue;
    text += (text.empty() ? "" : " ") + part;
  }
  return text;
}

}  // namespace

std::vector<SearchAxis> memory_search_axes(const TrainingPlan& plan) {
  std::vector<SearchAxis> axes;
  const std::int64_t hidden = plan.model.hidden;
  const std::int64_t largest_weight = 4 * hidden * hidden;

  // Smaller micro-batches at the same tokens per step: each added one makes its calls again.
  SearchAxis geometry{"micro-batch", {{"", nullptr}}};
  for (std::int64_t batch = plan.micro_batch / 2; batch >= 1; batch /= 2) {
    if (plan.micro_batch % batch != 0) continue;
    const std::int64_t micro_batches = plan.micro_batches * (plan.micro_batch / batch);
    geometry.choices.push_back({"--batch " + std::to_string(batch) + (plan.grid.pp > 1 ? " --micro-batches " : " --grad-accum ") +
                                    std::to_string(micro_batches),
                                [batch, micro_batches](TrainingPlan& variant) {
                                  variant.micro_batch = batch;
                                  variant.micro_batches = micro_batches;
                                }});
  }
  axes.push_back(std::move(geometry));

  // More recompute: policies that recompute more than the plan's.
  const auto recomputed = [&](const RecomputePolicy& policy) {
    return recompute_flops(plan.model, plan.micro_batch, plan.sequence, policy) * static_cast<double>(plan.micro_batches);
  };
  SearchAxis recompute{"recompute", {{"", nullptr}}};
  const double current_recompute = recomputed(plan.recompute);
  for (const RecomputePolicy& policy : recompute_overview(plan.model.layers)) {
    const double added = recomputed(policy) - current_recompute;
    if (added <= 0 || policy.name() == plan.recompute.name()) continue;
    recompute.choices.push_back({"--checkpointing " + policy.name(), [policy](TrainingPlan& variant) { variant.recompute = policy; }});
  }
  axes.push_back(std::move(recompute));

  // Gradient buckets act where gradients stream (offloaded, or several dp ranks): one more call each, so
  // no smaller than a 1024th of the rank's parameters (more calls than that cost more than they save,
  // and make each dry run slow).
  const std::int64_t fewest_bucket = std::max(hidden, plan.model.parameter_count() / std::max(plan.grid.pp, 1) / 1024);
  const auto bucket_choices = [&](const std::string& base_flags, bool offload) {
    std::vector<PlanChoice> choices;
    const std::int64_t from = plan.reduce_bucket_elements > 0 ? plan.reduce_bucket_elements : 2 * largest_weight;
    for (const std::int64_t elements : halvings(from, fewest_bucket, 4)) {
      choices.push_back({joined({base_flags, "--reduce-bucket-size " + std::to_string(elements)}), [elements, offload](TrainingPlan& variant) {
                           if (offload) variant.offload_optimizer = offload::OffloadDevice::cpu;
                           variant.reduce_bucket_elements = elements;
                         }});
    }
    return choices;
  };
  // The optimizer to pinned host memory: gradients out, parameters back, the update on the host.
  if (!plan.offload_optimizer) {
    SearchAxis offload{"offload", {{"", nullptr}, {"--offload-optimizer cpu", [](TrainingPlan& variant) {
                                                        variant.offload_optimizer = offload::OffloadDevice::cpu;
                                                      }}}};
    if (!plan.data_parallel()) {  // one rank streams gradients only when offloaded: its buckets go with the offload
      for (PlanChoice& choice : bucket_choices("--offload-optimizer cpu", true)) offload.choices.push_back(std::move(choice));
    }
    axes.push_back(std::move(offload));
  }
  if (plan.offload_optimizer || plan.data_parallel()) {
    SearchAxis buckets{"buckets", {{"", nullptr}}};
    for (PlanChoice& choice : bucket_choices("", false)) buckets.choices.push_back(std::move(choice));
    axes.push_back(std::move(buckets));
  }

  // 16-bit weights on the cpu kernels: f32 copies for the matmuls in row slices.
  if (plan.precision != DType::f32 && plan.kernels == DeviceKind::cpu) {
    SearchAxis copies{"weight copies", {{"", nullptr}}};
    const std::int64_t from = plan.weight_copy_elements > 0 ? plan.weight_copy_elements : largest_weight;
    for (const std::int64_t elements : halvings(from, std::max(hidden, largest_weight / 64), 4)) {  // 64 slices of a weight at most
      copies.choices.push_back({"--weight-copy-elements " + std::to_string(elements), [elements](TrainingPlan& variant) { variant.weight_copy_elements = elements; }});
    }
    axes.push_back(std::move(copies));
  }

  // Expandable segments where they are off: freed memory never strands between segments.
  if (!plan.allocator.expandable_segments) {
    axes.push_back({"allocator", {{"", nullptr}, {"FERRY_ALLOC_CONF=expandable_segments:True", [](TrainingPlan& variant) {
                                                      variant.allocator.expandable_segments = true;
                                                    }}}});
  }

  // A higher ZeRO stage on several dp ranks.
  if (plan.data_parallel() && plan.zero_stage < 3) {
    SearchAxis zero{"zero", {{"", nullptr}}};
    for (int stage = plan.zero_stage + 1; stage <= 3; ++stage) {
      zero.choices.push_back({"--zero-stage " + std::to_string(stage), [stage](TrainingPlan& variant) { variant.zero_stage = stage; }});
    }
    axes.push_back(std::move(zero));
  }
  return axes;
}

MemorySearch search_memory(const TrainingPlan& plan, const std::vector<SearchAxis>& all_axes, std::size_t memory_limit,
                           const PeakMeasure& peak_reserved, const StepSeconds& step_seconds, std::size_t wanted, std::size_t budget) {
  MemorySearch search;
  search.combinations = 1;
  for (const SearchAxis& axis : all_axes) search.combinations *= axis.choices.size();
  const auto key_of = [](const std::vector<const PlanChoice*>& choices) {
    std::vector<std::string> key;
    for (const PlanChoice* choice : choices) key.push_back(choice->flags);
    return key;
  };
  const auto variant_of = [&](const std::vector<const PlanChoice*>& choices) {
    TrainingPlan variant = plan;
    for (const PlanChoice* choice : choices) {
      if (choice->apply) choice->apply(variant);
    }
    return variant;
  };
  // A combination's cost: the model's step time of the variant beside the plan's (not a sum of the
  // choices' own: offloading makes smaller buckets cost more, recompute costs more at more micro-batches).
  const double plan_seconds = step_seconds(plan);
  std::map<std::vector<std::string>, double> costs;  // by the flags of each axis's choice
  const auto cost_of_choices = [&](const std::vector<const PlanChoice*>& choices) {
    const std::vector<std::string> key = key_of(choices);
    if (const auto found = costs.find(key); found != costs.end()) return found->second;
    return costs[key] = step_seconds(variant_of(choices)) - plan_seconds;
  };
  std::map<std::vector<std::string>, MemoryCandidate> measured;
  const auto measure = [&](const std::vector<const PlanChoice*>& choices) {
    const std::vector<std::string> key = key_of(choices);
    if (const auto found = measured.find(key); found != measured.end()) return found->second;
    const TrainingPlan variant = variant_of(choices);
    const double seconds = cost_of_choices(choices);
    std::vector<std::string> flags = key;
    std::stable_partition(flags.begin(), flags.end(), [](const std::string& flag) { return flag.starts_with("FERRY_"); });  // the environment first
    const std::int64_t peak = peak_reserved(variant);
    ++search.measured;
    return measured[key] = MemoryCandidate{joined(flags), seconds, peak, peak <= static_cast<std::int64_t>(memory_limit)};
  };
  std::vector<const PlanChoice*> base;
  for (const SearchAxis& axis : all_axes) base.push_back(&axis.choices.front());
  search.current_peak = measure(base).peak_reserved;

  // Each choice with every other axis at its last (most saving) choice, where what it saves shows even
  // when it acts only beside another (smaller buckets once the activations are recomputed): a choice that
  // saves no more there than a cheaper one of its axis goes.
  std::vector<const PlanChoice*> most;
  for (const SearchAxis& axis : all_axes) most.push_back(&axis.choices.back());
  // That peak is also a floor for any combination with the choice (the other axes' cheaper choices save
  // less), so a combination whose floor is over the limit is passed over unmeasured.
  std::vector<std::vector<const PlanChoice*>> axes;
  std::vector<std::vector<std::int64_t>> floors;
  for (std::size_t axis = 0; axis < all_axes.size(); ++axis) {
    std::vector<const PlanChoice*> kept;
    std::vector<std::int64_t> kept_floors;
    for (const PlanChoice& choice : all_axes[axis].choices) {
      std::vector<const PlanChoice*> context = most;
      context[axis] = &choice;
      const std::int64_t peak = measure(context).peak_reserved;
      if (!kept_floors.empty() && peak >= kept_floors.back()) continue;
      kept.push_back(&choice);
      kept_floors.push_back(peak);
    }
    axes.push_back(std::move(kept));
    floors.push_back(std::move(kept_floors));
  }

  // Then every combination of what is left, in order of predicted step time, through the loop `ferry
  // plan` uses: one whose floor is over the limit, or that saves no more on any axis than one measured
  // too big, is too big unmeasured; one that extends a fit (more changes) is no answer; one whose
  // savings, added up, would not fit waits until the rest are measured.
  std::vector<std::vector<std::size_t>> combinations;
  for (std::vector<std::size_t> picks(axes.size(), 0);;) {
    std::size_t axis = 0;
    while (axis < axes.size() && ++picks[axis] == axes[axis].size()) picks[axis++] = 0;
    if (axis == axes.size()) break;  // back at the plan itself
    combinations.push_back(picks);
  }
  const auto choices_of = [&](const std::vector<std::size_t>& picks) {
    std::vector<const PlanChoice*> choices;
    for (std::size_t axis = 0; axis < axes.size(); ++axis) choices.push_back(axes[axis][picks[axis]]);
    return choices;
  };
  std::vector<double> seconds;
  for (const std::vector<std::size_t>& picks : combinations) seconds.push_back(cost_of_choices(choices_of(picks)));
  std::vector<std::size_t> order(combinations.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return seconds[a] < seconds[b]; });
  const auto picks_of = [&](std::size_t i) -> const std::vector<std::size_t>& { return combinations[order[i]]; };
  const auto no_more = [](const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) {  // a's choices at or before b's on every axis
    for (std::size_t axis = 0; axis < a.size(); ++axis) {
      if (a[axis] > b[axis]) return false;
    }
    return true;
  };
  // What each axis's choice adds to the most saving combination's peak, summed over the axes: where the
  // savings add up, a combination's peak.
  const std::int64_t most_peak = measure(most).peak_reserved;
  const auto limit = static_cast<std::int64_t>(memory_limit);
  CheapestFirstSearch loop;
  loop.candidates = combinations.size();
  loop.wanted = wanted;
  loop.budget = budget > search.measured ? budget - search.measured : 0;
  loop.measure = [&](std::size_t i) { return measure(choices_of(picks_of(i))).fits; };
  loop.too_big_unmeasured = [&](std::size_t i) -> std::optional<std::string> {
    std::int64_t floor = 0;
    for (std::size_t axis = 0; axis < axes.size(); ++axis) floor = std::max(floor, floors[axis][picks_of(i)[axis]]);
    if (floor > limit) return "its floor is over the limit";
    return std::nullopt;
  };
  loop.holds_no_less = [&](std::size_t a, std::size_t b) { return no_more(picks_of(a), picks_of(b)); };
  loop.extends = [&](std::size_t a, std::size_t b) { return no_more(picks_of(b), picks_of(a)); };
  loop.likely_too_big = [&](std::size_t i) {
    std::int64_t peak = most_peak;
    for (std::size_t axis = 0; axis < axes.size(); ++axis) peak += floors[axis][picks_of(i)[axis]] - most_peak;
    return peak > limit;
  };
  search_cheapest_first(loop);
  // The answer: of every combination measured that fits (those of the first pass too), the cheapest, then
  // each costlier one that saves more than every cheaper one (a costlier one that saves no more is no choice).
  std::vector<MemoryCandidate> fitting;
  for (const auto& [key, candidate] : measured) {
    if (candidate.fits) fitting.push_back(candidate);
  }
  std::sort(fitting.begin(), fitting.end(), [](const MemoryCandidate& a, const MemoryCandidate& b) {
    return a.seconds != b.seconds ? a.seconds < b.seconds : a.peak_reserved < b.peak_reserved;
  });
  for (const MemoryCandidate& candidate : fitting) {
    if (search.fitting.size() >= wanted) break;
    if (search.fitting.empty() || candidate.peak_reserved < search.fitting.back().peak_reserved) search.fitting.push_back(candidate);
  }
  if (search.fitting.empty()) {
    const MemoryCandidate* smallest = nullptr;
    for (const auto& [key, candidate] : measured) {
      if (smallest == nullptr || candidate.peak_reserved < smallest->peak_reserved ||
          (candidate.peak_reserved == smallest->peak_reserved && candidate.seconds < smallest->seconds)) {
        smallest = &candidate;
      }
    }
    if (smallest != nullptr) search.smallest = *smallest;
  }
  return search;
}

MemorySearch advise_memory(const TrainingPlan& plan, std::size_t memory_limit, const ClusterSpec& cluster) {
  MemorySearch search = search_memory(plan, memory_search_axes(plan), memory_limit, fullest_rank_peak,
                                      [&cluster](const TrainingPlan& variant) { return predict_step_time(variant, cluster).total(); });
  char figures[320];
  std::snprintf(figures, sizeof figures, "%.2g FLOP/s x %.2f sustained, device memory %.2g B/s, host link %.2g B/s, %s an op call, %s a collective",
                cluster.peak_flops, cluster.compute_efficiency, cluster.device_memory_bandwidth, cluster.host_link_bandwidth,
                format_seconds(cluster.call_seconds).c_str(), format_seconds(cluster.collective_seconds).c_str());
  search.cost_model = "`ferry plan`'s step-time model on " + cluster.name + " (" + figures + ")";
  return search;
}

std::string advise_out_of_memory(const TrainingPlan& plan, std::size_t memory_limit) {
  const DeviceKind kind = plan.kernels;
  const ClusterSpec cluster = cluster_of_run(kind, plan.grid.world(), memory_limit, kind == DeviceKind::cpu ? measure_cpu_gemm_flops() : 0.0);
  return describe_memory_advice(advise_memory(plan, memory_limit, cluster), memory_limit);
}

std::string describe_memory_advice(const MemorySearch& search, std::size_t memory_limit) {
  std::string text = "a dry run of this configuration peaks at " + format_bytes(static_cast<std::size_t>(search.current_peak)) +
                     " reserved against the limit of " + format_bytes(memory_limit);
  const std::string searched = std::to_string(search.measured) + " of " + std::to_string(search.combinations) +
                               " combinations dry-run, cheapest first by predicted step time: " + search.cost_model;
  if (!search.fitting.empty()) {
    text += "; the cheapest changes that fit (" + searched + "):";
    for (const MemoryCandidate& candidate : search.fitting) {
      char line[512];
      // A change can make the step faster (a pipeline's smaller micro-batches shrink its bubble).
      std::snprintf(line, sizeof line, "\n  %-60s peak reserved %10s  fits, %s%s a step", candidate.flags.c_str(),
                    format_bytes(static_cast<std::size_t>(candidate.peak_reserved)).c_str(), candidate.seconds < 0 ? "-" : "+",
                    format_seconds(std::abs(candidate.seconds)).c_str());
      text += line;
    }
    return text;
  }
  text += "; nothing tried fits (" + searched + ")";
  if (search.smallest) {
    text += ": the least memory, " + format_bytes(static_cast<std::size_t>(search.smallest->peak_reserved)) + " reserved, comes with " +
            (search.smallest->flags.empty() ? std::string("the configuration as it is") : search.smallest->flags) + "; it fits --device-memory " +
            std::to_string(search.smallest->peak_reserved) + " (or spread the model over more devices: --pp, --dp with --zero-stage)";
  }
  return text;
}

}  // namespace ferry
