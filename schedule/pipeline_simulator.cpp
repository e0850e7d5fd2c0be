#include "schedule/pipeline_simulator.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "schedule/pipeline_progress.h"

namespace ferry {
namespace {

// Bytes per stage from `bytes` (empty: 1 byte each); throws when it does not name every stage.
std::vector<std::int64_t> per_stage_bytes(const std::vector<std::int64_t>& bytes, std::int32_t stages, const char* what) {
  if (bytes.empty()) return std::vector<std::int64_t>(static_cast<std::size_t>(stages), 1);
  if (bytes.size() != static_cast<std::size_t>(stages)) {
    throw std::invalid_argument(std::string("StageMemory::") + what + " has " + std::to_string(bytes.size()) +
                                " entries for " + std::to_string(stages) + " stages: give one per stage or none");
  }
  return bytes;
}

void check_shape(const PipelineSchedule& schedule) {
  if (schedule.ranks < 1 || schedule.actions.size() != static_cast<std::size_t>(schedule.ranks) ||
      schedule.stages < schedule.ranks || schedule.stages % schedule.ranks != 0) {
    throw std::invalid_argument("cannot simulate a schedule with " + std::to_string(schedule.actions.size()) +
                                " rank lists, " + std::to_string(schedule.ranks) + " ranks and " +
                                std::to_string(schedule.stages) + " stages (validate_pipeline_schedule says why)");
  }
  for (std::size_t rank = 0; rank < schedule.actions.size(); ++rank) {
    for (const std::optional<PipelineAction>& action : schedule.actions[rank]) {
      if (action && (action->stage < 0 || action->stage >= schedule.stages)) {
        throw std::invalid_argument("cannot simulate: rank " + std::to_string(rank) + " runs " + action->to_string() +
                                    " but the schedule has stages 0.." + std::to_string(schedule.stages - 1));
      }
    }
  }
}

// What one stage holds as the simulation goes: micro-batches between F and B (or I), and between I and W.
struct StageHoldings {
  std::int64_t in_flight = 0;
  std::int64_t stashed = 0;
  std::int64_t bytes(std::int64_t activation_bytes, std::int64_t stash_bytes) const { return in_flight * activation_bytes + stashed * stash_bytes; }
};

}  // namespace

double PipelineCosts::duration(const PipelineAction& action) const {
  switch (action.type) {
    case PipelineActionType::forward: return forward;
    case PipelineActionType::backward: return backward + weight;
    case PipelineActionType::backward_input: return backward;
    case PipelineActionType::backward_weight: return weight;
    default: return 0;
  }
}

PipelineCosts unit_pipeline_costs(const PipelineSchedule& schedule) {
  return PipelineCosts{1, 1, schedule.splits_backward() ? 1.0 : 0.0, 0};
}

PipelineCosts PipelineCosts::parse(const std::string& text) {
  const auto fail = [&]() {
    return std::invalid_argument("costs '" + text +
                                 "' are not F,B or F,B,W (non-negative numbers: forward, input-gradient backward, "
                                 "weight-gradient backward), e.g. 1,1 or 1,1,1");
  };
  std::vector<double> values;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    double value = 0;
    const char* first = text.data() + begin;
    const char* last = text.data() + comma;
    const auto [end, error] = std::from_chars(first, last, value);
    if (first == last || error != std::errc() || end != last || !std::isfinite(value) || value < 0) throw fail();
    values.push_back(value);
    begin = comma + 1;
  }
  if (values.size() < 2 || values.size() > 3) throw fail();
  return PipelineCosts{values[0], values[1], values.size() == 3 ? values[2] : 0.0, 0};
}

PipelineSimulation simulate_pipeline_schedule(const PipelineSchedule& schedule, const PipelineCosts& costs,
                                              const StageMemory& memory) {
  check_shape(schedule);
  const std::vector<std::int64_t> activation_bytes = per_stage_bytes(memory.activation_bytes, schedule.stages, "activation_bytes");
  const std::vector<std::int64_t> stash_bytes = per_stage_bytes(memory.weight_stash_bytes, schedule.stages, "weight_stash_bytes");

  PipelineSimulation result;
  for (std::int32_t stage = 0; stage < schedule.stages; ++stage) {
    result.stages.push_back(StageSimulation{stage, schedule.rank_of_stage(stage), 0, 0, 0, 0});
  }
  std::vector<StageHoldings> holdings(static_cast<std::size_t>(schedule.stages));
  std::vector<std::int64_t> rank_held(static_cast<std::size_t>(schedule.ranks), 0);
  result.rank_peak_activation_bytes.assign(static_cast<std::size_t>(schedule.ranks), 0);
  std::vector<double> rank_free(static_cast<std::size_t>(schedule.ranks), 0);
  std::vector<double> rank_busy(static_cast<std::size_t>(schedule.ranks), 0);
  std::unordered_map<PipelineAction, double, PipelineActionHash> end_time;

  PipelineProgress progress(schedule, SendSemantics::buffered);
  const auto on_done = [&](std::int32_t rank, const PipelineAction& action) {
    const double free_at = rank_free[static_cast<std::size_t>(rank)];
    double start = free_at;
    double end = free_at;
    if (action.type == PipelineActionType::receive_forward || action.type == PipelineActionType::receive_backward) {
      const double sent = end_time.at(matching_communication(action));
      start = std::max(free_at, sent);
      end = std::max(free_at, sent + costs.transfer);
    } else {
      for (const ActionInput& input : progress.dependencies().inputs(action)) {
        start = std::max(start, end_time.at(input.action) + (input.implied_transfer ? costs.transfer : 0.0));
      }
      end = start + costs.duration(action);
    }
    rank_free[static_cast<std::size_t>(rank)] = end;
    end_time[action] = end;
    result.timeline.push_back(SimulatedAction{rank, action, start, end});
    if (action.is_communication()) return;

    const auto stage = static_cast<std::size_t>(action.stage);
    result.stages[stage].busy += end - start;
    rank_busy[static_cast<std::size_t>(rank)] += end - start;
    StageHoldings& held = holdings[stage];
    const std::int64_t held_before = held.bytes(activation_bytes[stage], stash_bytes[stage]);
    switch (action.type) {
      case PipelineActionType::forward: ++held.in_flight; break;
      case PipelineActionType::backward: --held.in_flight; break;
      case PipelineActionType::backward_input:
        --held.in_flight;
        ++held.stashed;
        break;
      case PipelineActionType::backward_weight: --held.stashed; break;
      default: break;
    }
    StageSimulation& simulated = result.stages[stage];
    simulated.peak_in_flight = std::max(simulated.peak_in_flight, static_cast<std::int32_t>(held.in_flight));
    const std::int64_t held_after = held.bytes(activation_bytes[stage], stash_bytes[stage]);
    simulated.peak_activation_bytes = std::max(simulated.peak_activation_bytes, held_after);
    // A rank runs its actions in its list's order: its stages' holdings add up in that order.
    std::int64_t& rank_bytes = rank_held[static_cast<std::size_t>(rank)];
    rank_bytes += held_after - held_before;
    result.rank_peak_activation_bytes[static_cast<std::size_t>(rank)] =
        std::max(result.rank_peak_activation_bytes[static_cast<std::size_t>(rank)], rank_bytes);
  };
  if (!progress.run(on_done)) throw std::runtime_error("schedule is not progressing: " + progress.describe_blocked());

  // By start, then rank: a rank's actions completed in its list's order, whatever order the ranks ran in.
  std::stable_sort(result.timeline.begin(), result.timeline.end(), [](const SimulatedAction& a, const SimulatedAction& b) {
    return a.start != b.start ? a.start < b.start : a.rank < b.rank;
  });
  for (const double free_at : rank_free) result.makespan = std::max(result.makespan, free_at);
  if (result.makespan > 0) {
    double total_busy = 0;
    for (const double busy : rank_busy) total_busy += busy;
    result.bubble_fraction = 1 - total_busy / (schedule.ranks * result.makespan);
    for (StageSimulation& stage : result.stages) {
      stage.bubble_fraction = 1 - rank_busy[static_cast<std::size_t>(stage.rank)] / result.makespan;
    }
  }
  return result;
}

}  // namespace ferry
