#include "engine/train/memory_search.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <queue>
#include <set>

#include "allocator/byte_size.h"
#include "engine/train/training_step.h"
#include "schedule/recompute_policy.h"

namespace ferry {
namespace {

// Parameters a rank holds (a pipeline stage its share).
double rank_parameters(const TrainingPlan& plan) {
  return static_cast<double>(plan.model.parameter_count()) / static_cast<double>(std::max(plan.grid.pp, 1));
}

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

StepCostRates StepCostRates::for_device(DeviceKind kind) {
  // Nominal figures, stated with the advice: a core's worth of BLAS and a DDR channel on the cpu device,
  // an H100-class GPU's sustained bf16 rate, HBM and PCIe 4 otherwise.
  if (kind == DeviceKind::cuda) return {4e14, 2e12, 2.5e10, 5e-6};
  return {1e11, 1e10, 1e10, 2e-5};
}

std::string StepCostRates::describe() const {
  char text[160];
  std::snprintf(text, sizeof text, "%.0e FLOP/s, device memory %.0e B/s, host link %.0e B/s, %s a call", flops, device_bytes, host_link_bytes,
                format_seconds(launch_seconds).c_str());
  return text;
}

std::vector<SearchAxis> memory_search_axes(const TrainingPlan& plan, const StepCostRates& rates) {
  std::vector<SearchAxis> axes;
  const double psi = rank_parameters(plan);
  const double parameter_bytes = static_cast<double>(dtype_size(plan.precision));
  const std::int64_t hidden = plan.model.hidden;
  const std::int64_t largest_weight = 4 * hidden * hidden;

  // Smaller micro-batches at the same tokens per step: each added one reads the weights again.
  SearchAxis geometry{"micro-batch", {{"", 0, nullptr}}};
  for (std::int64_t batch = plan.micro_batch / 2; batch >= 1; batch /= 2) {
    if (plan.micro_batch % batch != 0) continue;
    const std::int64_t micro_batches = plan.micro_batches * (plan.micro_batch / batch);
    const auto added = static_cast<double>(micro_batches - plan.micro_batches);
    geometry.choices.push_back({"--batch " + std::to_string(batch) + (plan.grid.pp > 1 ? " --micro-batches " : " --grad-accum ") +
                                    std::to_string(micro_batches),
                                added * (3 * psi * parameter_bytes / rates.device_bytes + 50 * rates.launch_seconds),
                                [batch, micro_batches](TrainingPlan& variant) {
                                  variant.micro_batch = batch;
                                  variant.micro_batches = micro_batches;
                                }});
  }
  axes.push_back(std::move(geometry));

  // More recompute: the FLOPs it adds per step.
  const auto recomputed = [&](const RecomputePolicy& policy) {
    return recompute_flops(plan.model, plan.micro_batch, plan.sequence, policy) * static_cast<double>(plan.micro_batches);
  };
  SearchAxis recompute{"recompute", {{"", 0, nullptr}}};
  const double current_recompute = recomputed(plan.recompute);
  for (const RecomputePolicy& policy : recompute_overview(plan.model.layers)) {
    const double added = recomputed(policy) - current_recompute;
    if (added <= 0 || policy.name() == plan.recompute.name()) continue;
    recompute.choices.push_back({"--checkpointing " + policy.name(), added / rates.flops,
                                 [policy](TrainingPlan& variant) { variant.recompute = policy; }});
  }
  axes.push_back(std::move(recompute));

  // Gradient buckets act where gradients stream (offloaded, or several dp ranks): one more call each.
  const auto bucket_choices = [&](double base_seconds, const std::string& base_flags, bool offload) {
    std::vector<PlanChoice> choices;
    const std::int64_t from = plan.reduce_bucket_elements > 0 ? plan.reduce_bucket_elements : 2 * largest_weight;
    for (const std::int64_t elements : halvings(from, hidden, 4)) {
      const double buckets = psi / static_cast<double>(elements);
      choices.push_back({joined({base_flags, "--reduce-bucket-size " + std::to_string(elements)}),
                         base_seconds + buckets * rates.launch_seconds, [elements, offload](TrainingPlan& variant) {
                           if (offload) variant.offload_optimizer = offload::OffloadDevice::cpu;
                           variant.reduce_bucket_elements = elements;
                         }});
    }
    return choices;
  };
  // The optimizer to pinned host memory: gradients out, parameters back, the update on the host.
  if (!plan.offload_optimizer) {
    const double offload_seconds = ((4 + parameter_bytes) * psi + 32 * psi) / rates.host_link_bytes;
    SearchAxis offload{"offload", {{"", 0, nullptr}, {"--offload-optimizer cpu", offload_seconds, [](TrainingPlan& variant) {
                                                        variant.offload_optimizer = offload::OffloadDevice::cpu;
                                                      }}}};
    if (!plan.data_parallel()) {  // one rank streams gradients only when offloaded: its buckets go with the offload
      for (PlanChoice& choice : bucket_choices(offload_seconds, "--offload-optimizer cpu", true)) offload.choices.push_back(std::move(choice));
    }
    axes.push_back(std::move(offload));
  }
  if (plan.offload_optimizer || plan.data_parallel()) {
    SearchAxis buckets{"buckets", {{"", 0, nullptr}}};
    for (PlanChoice& choice : bucket_choices(0, "", false)) buckets.choices.push_back(std::move(choice));
    axes.push_back(std::move(buckets));
  }

  // 16-bit weights on the cpu kernels: f32 copies for the matmuls in row slices.
  if (plan.precision != DType::f32 && plan.device != DeviceKind::cuda) {
    SearchAxis copies{"weight copies", {{"", 0, nullptr}}};
    const std::int64_t from = plan.weight_copy_elements > 0 ? plan.weight_copy_elements : largest_weight;
    for (const std::int64_t elements : halvings(from, hidden, 4)) {
      const double calls = static_cast<double>(plan.model.layers * 4 * plan.micro_batches) * static_cast<double>(largest_weight / elements);
      copies.choices.push_back({"--weight-copy-elements " + std::to_string(elements), calls * rates.launch_seconds,
                                [elements](TrainingPlan& variant) { variant.weight_copy_elements = elements; }});
    }
    axes.push_back(std::move(copies));
  }

  // Expandable segments where they are off: freed memory never strands between segments.
  if (!plan.allocator.expandable_segments) {
    axes.push_back({"allocator", {{"", 0, nullptr}, {"FERRY_ALLOC_CONF=expandable_segments:True", 0, [](TrainingPlan& variant) {
                                                      variant.allocator.expandable_segments = true;
                                                    }}}});
  }

  // A higher ZeRO stage on several dp ranks: the same traffic without a pipeline; with one, stage 2
  // reduces every micro-batch's gradients. Stage 3 gathers the parameters twice a micro-batch instead of
  // once a step.
  if (plan.data_parallel() && plan.zero_stage < 3) {
    SearchAxis zero{"zero", {{"", 0, nullptr}}};
    for (int stage = plan.zero_stage + 1; stage <= 3; ++stage) {
      const double traffic = stage == 3                       ? static_cast<double>(2 * plan.micro_batches - 1) * parameter_bytes * psi / rates.host_link_bytes
                             : stage == 2 && plan.grid.pp > 1 ? static_cast<double>(plan.micro_batches - 1) * 4 * psi / rates.host_link_bytes
                                                              : 0;
      zero.choices.push_back({"--zero-stage " + std::to_string(stage), traffic, [stage](TrainingPlan& variant) { variant.zero_stage = stage; }});
    }
    axes.push_back(std::move(zero));
  }
  return axes;
}

MemorySearch search_memory(const TrainingPlan& plan, const std::vector<SearchAxis>& all_axes, std::size_t memory_limit,
                           const PeakMeasure& peak_reserved, std::size_t wanted, std::size_t budget) {
  MemorySearch search;
  search.combinations = 1;
  for (const SearchAxis& axis : all_axes) search.combinations *= axis.choices.size();
  std::map<std::vector<std::string>, MemoryCandidate> measured;  // by the flags of each axis's choice
  const auto measure = [&](const std::vector<const PlanChoice*>& choices) {
    std::vector<std::string> key;
    for (const PlanChoice* choice : choices) key.push_back(choice->flags);
    if (const auto found = measured.find(key); found != measured.end()) return found->second;
    TrainingPlan variant = plan;
    double seconds = 0;
    for (const PlanChoice* choice : choices) {
      if (choice->apply) choice->apply(variant);
      seconds += choice->seconds;
    }
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

  // Then combinations of what is left, cheapest first: a heap of index vectors, each popped one measured
  // and its one-step-costlier neighbours pushed unless it fits (they cost more and it fits already).
  const auto cost_of = [&](const std::vector<std::size_t>& picks) {
    double seconds = 0;
    for (std::size_t axis = 0; axis < axes.size(); ++axis) seconds += axes[axis][picks[axis]]->seconds;
    return seconds;
  };
  const auto choices_of = [&](const std::vector<std::size_t>& picks) {
    std::vector<const PlanChoice*> choices;
    for (std::size_t axis = 0; axis < axes.size(); ++axis) choices.push_back(axes[axis][picks[axis]]);
    return choices;
  };
  using Entry = std::pair<double, std::vector<std::size_t>>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> frontier;
  std::set<std::vector<std::size_t>> seen;
  const auto push_neighbours = [&](const std::vector<std::size_t>& picks) {
    for (std::size_t axis = 0; axis < axes.size(); ++axis) {
      if (picks[axis] + 1 >= axes[axis].size()) continue;
      std::vector<std::size_t> next = picks;
      ++next[axis];
      if (seen.insert(next).second) frontier.push({cost_of(next), next});
    }
  };
  const std::vector<std::size_t> origin(axes.size(), 0);
  seen.insert(origin);
  push_neighbours(origin);
  while (!frontier.empty() && search.fitting.size() < wanted && search.measured < budget) {
    const std::vector<std::size_t> picks = frontier.top().second;
    frontier.pop();
    std::int64_t floor = 0;
    for (std::size_t axis = 0; axis < axes.size(); ++axis) floor = std::max(floor, floors[axis][picks[axis]]);
    if (floor > static_cast<std::int64_t>(memory_limit)) {
      push_neighbours(picks);
      continue;
    }
    const MemoryCandidate candidate = measure(choices_of(picks));
    if (!candidate.fits) {
      push_neighbours(picks);
      continue;
    }
    // The few that fit, each saving more than every cheaper one found (a costlier one that saves no
    // more is no choice).
    if (search.fitting.empty() || candidate.peak_reserved < search.fitting.back().peak_reserved) search.fitting.push_back(candidate);
  }
  if (search.fitting.empty() && measure(most).fits) search.fitting.push_back(measure(most));  // measured above
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

MemorySearch advise_memory(const TrainingPlan& plan, std::size_t memory_limit, const PeakMeasure& peak_reserved) {
  const StepCostRates rates = StepCostRates::for_device(plan.device);
  MemorySearch search = search_memory(plan, memory_search_axes(plan, rates), memory_limit, peak_reserved);
  search.cost_model = rates.describe();
  return search;
}

std::string describe_memory_advice(const MemorySearch& search, std::size_t memory_limit) {
  std::string text = "a dry run of this configuration peaks at " + format_bytes(static_cast<std::size_t>(search.current_peak)) +
                     " reserved against the limit of " + format_bytes(memory_limit);
  const std::string searched = std::to_string(search.measured) + " of " + std::to_string(search.combinations) +
                               " combinations dry-run, cheapest first by predicted step time at " + search.cost_model;
  if (!search.fitting.empty()) {
    text += "; the cheapest changes that fit (" + searched + "):";
    for (const MemoryCandidate& candidate : search.fitting) {
      char line[512];
      std::snprintf(line, sizeof line, "\n  %-60s peak reserved %10s  fits, +%s a step", candidate.flags.c_str(),
                    format_bytes(static_cast<std::size_t>(candidate.peak_reserved)).c_str(), format_seconds(candidate.seconds).c_str());
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
