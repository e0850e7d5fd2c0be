// The schedule generators: each writes every rank's order of compute actions, then one unit-cost
// simulation places the actions in time slots, with bubbles where a rank waits.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_simulator.h"

namespace ferry {
namespace {

using ComputeOrder = std::vector<RankActions>;  // [rank] compute actions in order, no bubbles

PipelineAction make(std::int32_t stage, PipelineActionType type, std::int32_t micro_batch) {
  return {stage, type, micro_batch};
}

// DAPPLE's early backward (PipeDream-Flush) with `warmup(stage)` forwards first, then one B and one F
// alternately (B first, as PyTorch's Schedule1F1B), then the remaining B's. GPipe is the case warmup = m.
// Backwards run in micro-batch order 0..m-1 (PyTorch's order).
template <typename Warmup>
ComputeOrder early_backward_order(std::int32_t ranks, std::int32_t micro_batches, Warmup warmup) {
  ComputeOrder order(static_cast<std::size_t>(ranks));
  for (std::int32_t stage = 0; stage < ranks; ++stage) {
    RankActions& list = order[static_cast<std::size_t>(stage)];
    const std::int32_t forwards_first = std::min(micro_batches, warmup(stage));
    for (std::int32_t micro_batch = 0; micro_batch < forwards_first; ++micro_batch) {
      list.push_back(make(stage, PipelineActionType::forward, micro_batch));
    }
    for (std::int32_t micro_batch = 0; micro_batch < micro_batches; ++micro_batch) {
      list.push_back(make(stage, PipelineActionType::backward, micro_batch));
      if (forwards_first + micro_batch < micro_batches) {
        list.push_back(make(stage, PipelineActionType::forward, forwards_first + micro_batch));
      }
    }
  }
  return order;
}

// ZB-H1 (Qi et al., ICLR 2024): 1F1B's warm-up min(m, p-s) and in-flight peak, with each backward split
// into I and W. Stage s defers its first s W's, so every stage holds at most p micro-batches (F done, W
// not) like 1F1B's first stage, the I's run ahead of the W's and the deferred W's fill the cool-down.
// Cycle after the warm-up: I, then a W when one is due, then the next F. Unit costs: p-1 idle slots per
// stage for m >= p, a third of 1F1B's 3(p-1).
ComputeOrder zero_bubble_h1_order(std::int32_t ranks, std::int32_t micro_batches) {
  ComputeOrder order(static_cast<std::size_t>(ranks));
  for (std::int32_t stage = 0; stage < ranks; ++stage) {
    RankActions& list = order[static_cast<std::size_t>(stage)];
    std::int32_t forwards = std::min(micro_batches, ranks - stage);
    std::int32_t weights = 0;
    for (std::int32_t micro_batch = 0; micro_batch < forwards; ++micro_batch) {
      list.push_back(make(stage, PipelineActionType::forward, micro_batch));
    }
    for (std::int32_t micro_batch = 0; micro_batch < micro_batches; ++micro_batch) {
      list.push_back(make(stage, PipelineActionType::backward_input, micro_batch));
      if (micro_batch >= stage) list.push_back(make(stage, PipelineActionType::backward_weight, weights++));
      if (forwards < micro_batches) list.push_back(make(stage, PipelineActionType::forward, forwards++));
    }
    while (weights < micro_batches) list.push_back(make(stage, PipelineActionType::backward_weight, weights++));
  }
  return order;
}

// Megatron's interleaved 1F1B: rank r holds stages r, r+p, ..., r+(V-1)p. Its k-th forward runs chunk
// (k mod pV) / p on micro-batch (k / pV) p + k mod p (groups of p micro-batches per chunk); its k-th
// backward the same micro-batch on chunk V-1-(k mod pV)/p. Warm-up 2(p-r-1) + (V-1)p forwards (at most
// mV), then one F and one B alternately (F first, as Megatron), then the remaining B's.
ComputeOrder interleaved_order(std::int32_t ranks, std::int32_t chunks, std::int32_t micro_batches) {
  ComputeOrder order(static_cast<std::size_t>(ranks));
  const std::int32_t total = micro_batches * chunks;
  const std::int32_t group = ranks * chunks;
  for (std::int32_t rank = 0; rank < ranks; ++rank) {
    const auto action = [&](std::int32_t k, bool forward) {
      const std::int32_t chunk_in_order = (k % group) / ranks;
      const std::int32_t chunk = forward ? chunk_in_order : chunks - 1 - chunk_in_order;
      const std::int32_t micro_batch = (k / group) * ranks + k % ranks;
      return make(chunk * ranks + rank, forward ? PipelineActionType::forward : PipelineActionType::backward, micro_batch);
    };
    RankActions& list = order[static_cast<std::size_t>(rank)];
    const std::int32_t warmup = std::min(2 * (ranks - rank - 1) + (chunks - 1) * ranks, total);
    for (std::int32_t k = 0; k < warmup; ++k) list.push_back(action(k, true));
    for (std::int32_t k = 0; k < total; ++k) {
      if (warmup + k < total) list.push_back(action(warmup + k, true));
      list.push_back(action(k, false));
    }
  }
  return order;
}

// Places each rank's actions in unit time slots (F = B = I = W = 1, no transfer time): an action goes
// in the first slot where its rank is free and its inputs are done; the slots skipped are bubbles.
PipelineSchedule place_in_time_slots(PipelineSchedule schedule, const ComputeOrder& order) {
  schedule.actions.assign(order.begin(), order.end());
  const PipelineSimulation simulation = simulate_pipeline_schedule(schedule, unit_pipeline_costs(schedule));
  std::vector<RankActions> slots(static_cast<std::size_t>(schedule.ranks));
  for (const SimulatedAction& each : simulation.timeline) {
    RankActions& rank = slots[static_cast<std::size_t>(each.rank)];
    const auto slot = static_cast<std::size_t>(std::lround(each.start));
    while (rank.size() < slot) rank.push_back(std::nullopt);
    rank.push_back(each.action);
  }
  schedule.actions = std::move(slots);
  return schedule;
}

std::string names_list() {
  std::string text;
  for (const std::string& name : pipeline_schedule_names()) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// "interleaved:V" -> V (>= 2); throws naming the fix.
std::int32_t interleaved_chunks(std::string_view name) {
  const std::string_view digits = name.substr(name.find(':') + 1);
  std::int32_t chunks = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), chunks);
  if (error != std::errc() || end != digits.data() + digits.size() || chunks < 2) {
    throw std::invalid_argument("schedule '" + std::string(name) +
                                "' needs V >= 2 model chunks per rank (interleaved:2, interleaved:3, ...); "
                                "with one chunk per rank use 1f1b");
  }
  return chunks;
}

}  // namespace

std::vector<std::string> pipeline_schedule_names() { return {"gpipe", "1f1b", "1f1b-deep", "interleaved:V", "zb-h1"}; }

std::int32_t pipeline_stages_per_rank(std::string_view name) { return name.starts_with("interleaved") ? interleaved_chunks(name) : 1; }

std::string schedule_size_problem(std::int64_t ranks, std::int64_t stages, std::int64_t micro_batches) {
  if (ranks < 1 || stages < 1 || micro_batches < 1) return {};  // the shape checks name these
  // Each size at most the bound first, so the products below cannot overflow.
  const bool each_bounded = ranks <= kMaxScheduleCells && stages <= kMaxScheduleCells && micro_batches <= kMaxScheduleCells;
  if (each_bounded && 3 * stages * micro_batches + ranks * ranks <= kMaxScheduleCells) return {};
  return "a schedule of " + std::to_string(ranks) + " ranks, " + std::to_string(stages) + " stages and " + std::to_string(micro_batches) +
         " micro-batches is past ferry's bound of " + std::to_string(kMaxScheduleCells) +
         " cells (3 x stages x micro-batches + ranks^2): use fewer micro-batches or stages";
}

PipelineSchedule generate_pipeline_schedule(std::string_view name, std::int32_t ranks, std::int32_t micro_batches) {
  if (ranks < 1) throw std::invalid_argument("a pipeline needs at least 1 rank (--pp), got " + std::to_string(ranks));
  if (micro_batches < 1) {
    throw std::invalid_argument("a pipeline needs at least 1 micro-batch (--micro-batches), got " + std::to_string(micro_batches));
  }
  const std::int64_t stages = std::int64_t{ranks} * pipeline_stages_per_rank(name);
  if (const std::string size = schedule_size_problem(ranks, stages, micro_batches); !size.empty()) throw std::invalid_argument(size);
  PipelineSchedule schedule{std::string(name), ranks, ranks, micro_batches, {}};
  if (name == "gpipe") {
    return place_in_time_slots(schedule, early_backward_order(ranks, micro_batches, [&](std::int32_t) { return micro_batches; }));
  }
  if (name == "1f1b") {
    return place_in_time_slots(schedule, early_backward_order(ranks, micro_batches, [&](std::int32_t stage) { return ranks - stage; }));
  }
  if (name == "1f1b-deep") {
    return place_in_time_slots(
        schedule, early_backward_order(ranks, micro_batches, [&](std::int32_t stage) { return 2 * (ranks - stage) - 1; }));
  }
  if (name == "zb-h1") return place_in_time_slots(schedule, zero_bubble_h1_order(ranks, micro_batches));
  if (name.starts_with("interleaved:")) {
    const std::int32_t chunks = interleaved_chunks(name);
    if (micro_batches % ranks != 0) {
      const std::int32_t lower = micro_batches / ranks * ranks;
      throw std::invalid_argument(
          "schedule '" + std::string(name) + "' needs the micro-batches (" + std::to_string(micro_batches) +
          ") to be a multiple of the ranks (" + std::to_string(ranks) + "), as Megatron's interleaved 1F1B: use --micro-batches " +
          (lower > 0 ? std::to_string(lower) + " or " : std::string()) + std::to_string(lower + ranks));
    }
    schedule.stages = ranks * chunks;
    return place_in_time_slots(schedule, interleaved_order(ranks, chunks, micro_batches));
  }
  throw std::invalid_argument("unknown pipeline schedule '" + std::string(name) + "': choose one of " + names_list() +
                              " (V >= 2 model chunks per rank)");
}

}  // namespace ferry
