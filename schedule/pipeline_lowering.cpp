// Lowering a compute-only schedule: sends and receives between stages on different ranks, then the
// rank-parity repair that keeps the lowered schedule free of deadlocks under rendezvous sends.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <span>

#include "schedule/pipeline_lowering.h"
#include "schedule/pipeline_progress.h"

namespace ferry {
namespace {

// Planned times of the compute actions, from a simulation of the compute-only schedule.
struct Plan {
  std::unordered_map<PipelineAction, double, PipelineActionHash> starts;
  PipelineCosts costs;

  std::optional<double> start(const PipelineAction& action) const {
    const auto found = starts.find(action);
    return found == starts.end() ? std::nullopt : std::optional<double>(found->second);
  }
  std::optional<double> end(const PipelineAction& action) const {
    const std::optional<double> begin = start(action);
    return begin ? std::optional<double>(*begin + costs.duration(action)) : std::nullopt;
  }
};
constexpr double kNever = std::numeric_limits<double>::infinity();

// The compute-only schedule simulated under `costs`; when it cannot run, its positions (bubbles counted)
// stand in for the times, and the validator will say what is wrong.
Plan plan(const PipelineSchedule& compute, const PipelineCosts& costs) {
  Plan result{{}, costs};
  try {
    for (const SimulatedAction& each : simulate_pipeline_schedule(compute, costs).timeline) result.starts.emplace(each.action, each.start);
  } catch (const std::exception&) {
    result.starts.clear();
    for (const RankActions& rank : compute.actions) {
      for (std::size_t slot = 0; slot < rank.size(); ++slot) {
        if (rank[slot]) result.starts.try_emplace(*rank[slot], static_cast<double>(slot));
      }
    }
  }
  return result;
}

// Each receive right before the compute action that needs it, each send right after the one that
// produces it; none between stages on the same rank (the executor hands those tensors over locally).
std::vector<RankActions> place_communication(const PipelineSchedule& compute) {
  std::vector<RankActions> lowered(compute.actions.size());
  for (std::size_t rank = 0; rank < compute.actions.size(); ++rank) {
    const auto on_this_rank = [&](const PipelineAction& communication) {
      return compute.rank_of_stage(matching_communication(communication).stage) == static_cast<std::int32_t>(rank);
    };
    for (const std::optional<PipelineAction>& action : compute.actions[rank]) {
      if (!action) continue;
      const std::optional<PipelineAction> receive = input_receive(*action, compute.stages);
      if (receive && !on_this_rank(*receive)) lowered[rank].push_back(*receive);
      lowered[rank].push_back(*action);
      const std::optional<PipelineAction> send = output_send(*action, compute.stages);
      if (send && !on_this_rank(*send)) lowered[rank].push_back(*send);
    }
  }
  return lowered;
}

// When no rank can move under rendezvous sends, follows who waits for whom from each stuck rank until a
// rank repeats: a cycle. Some rank in it waits at a send whose receiver has not posted the receive yet;
// that receiver is made to receive first. Of the candidates an odd rank is chosen (even ranks send first,
// odd ranks receive first: Megatron-LM#5100, pytorch#172668); on a cycle of even ranks only (a ring of
// odd length, interleaved) the highest. Returns the receiver and its receive; nullopt when no cycle has
// a send in it (a compute order that cannot run, which the validator reports).
std::optional<std::pair<std::int32_t, PipelineAction>> receive_to_post_first(const std::vector<BlockedRank>& stuck) {
  std::map<std::int32_t, BlockedRank> blocked;
  for (const BlockedRank& each : stuck) blocked.emplace(each.rank, each);
  for (const auto& [start, unused] : blocked) {
    std::map<std::int32_t, int> visits;  // ranks on the walk from `start`; those seen twice form the cycle
    std::int32_t rank = start;
    while (blocked.contains(rank) && visits[rank] < 2) {
      ++visits[rank];
      const std::optional<std::int32_t> next = blocked.at(rank).waits_for_rank;
      if (!next || *next == rank) break;
      rank = *next;
    }
    std::optional<std::pair<std::int32_t, PipelineAction>> chosen;
    for (const auto& [member, count] : visits) {
      const BlockedRank& sender = blocked.at(member);
      if (count < 2 || !is_send(sender.action) || sender.waits_for != matching_communication(sender.action)) continue;
      const std::int32_t receiver = *sender.waits_for_rank;
      const bool better = !chosen || (receiver % 2 == 1 && (chosen->first % 2 == 0 || receiver < chosen->first)) ||
                          (receiver % 2 == 0 && chosen->first % 2 == 0 && receiver > chosen->first);
      if (better) chosen = std::pair{receiver, sender.waits_for};
    }
    if (chosen) return chosen;
  }
  return std::nullopt;
}

// Reorders a rank's remaining actions so that `receive` (y) comes before the send the rank is stuck at
// (x, its next action): the two go together, y then x, at one boundary among the actions between them.
// Of the boundaries where neither crosses another transfer in its direction with its peer (which would
// change the order per pair of ranks), the plan picks the one where the rank waits least for y and x
// arrives least late at its consumer, the earliest of equals. Without a send to move, y goes first.
// Returns the new order of the actions up to and including y; those after it keep theirs.
std::vector<PipelineAction> receive_first(std::span<const PipelineAction> remaining, const PipelineAction& receive,
                                          const PipelineDependencies& dependencies, const Plan& plan) {
  const auto found = std::find(remaining.begin(), remaining.end(), receive);
  std::vector<PipelineAction> reordered{receive};
  if (!is_send(remaining.front()) || found == remaining.end()) {
    std::copy_if(remaining.begin(), found == remaining.end() ? found : found + 1, std::back_inserter(reordered),
                 [&](const PipelineAction& action) { return action != receive; });
    return reordered;
  }
  const PipelineAction send = remaining.front();
  const std::vector<PipelineAction> between(remaining.begin() + 1, found);
  const auto same_direction_and_peer = [&](const PipelineAction& action, const PipelineAction& moved) {
    const auto peer = [&](const PipelineAction& each) { return dependencies.rank_of_stage(matching_communication(each).stage); };
    return action.is_communication() && is_send(action) == is_send(moved) && peer(action) == peer(moved);
  };
  // The first planned compute start at or after each index of between, then after the receive: one
  // pass from the end (a search per boundary made lowering quadratic in the actions).
  double after_receive = kNever;
  for (auto each = found + 1; each != remaining.end(); ++each) {
    if (const std::optional<double> start = plan.start(*each); start && !each->is_communication()) {
      after_receive = *start;
      break;
    }
  }
  std::vector<double> compute_start_from(between.size() + 1, after_receive);
  for (std::size_t index = between.size(); index-- > 0;) {
    const std::optional<double> start = plan.start(between[index]);
    compute_start_from[index] = start && !between[index].is_communication() ? *start : compute_start_from[index + 1];
  }
  const auto next_compute_start = [&](std::size_t index) { return compute_start_from[index]; };
  // y may not cross a transfer in its direction with its peer: boundaries up to the last such one are closed to it.
  std::size_t first_open = 0;
  for (std::size_t index = 0; index < between.size(); ++index) {
    if (same_direction_and_peer(between[index], receive)) first_open = index + 1;
  }
  const double arrives = plan.end(dependencies.transfer_producer(receive)).value_or(0) + plan.costs.transfer;
  const double needed = plan.start(dependencies.transfer_consumer(send)).value_or(kNever) - plan.costs.transfer;
  double earliest = plan.end(dependencies.transfer_producer(send)).value_or(0);  // the pair cannot run before
  std::optional<std::size_t> best;
  double best_delay = 0;
  for (std::size_t boundary = 0; boundary <= between.size(); ++boundary) {
    if (boundary > 0) {
      const PipelineAction& crossed = between[boundary - 1];
      if (same_direction_and_peer(crossed, send)) break;  // x may go no further
      if (!crossed.is_communication()) earliest = std::max(earliest, plan.end(crossed).value_or(earliest));
    }
    if (boundary < first_open) continue;
    const double delay = std::max(0.0, arrives - next_compute_start(boundary)) + std::max(0.0, std::max(earliest, arrives) - needed);
    if (!best || delay < best_delay) {
      best = boundary;
      best_delay = delay;
    }
  }
  const auto split = between.begin() + static_cast<std::ptrdiff_t>(best.value_or(0));
  reordered.assign(between.begin(), split);
  reordered.push_back(receive);
  reordered.push_back(send);
  reordered.insert(reordered.end(), split, between.end());
  return reordered;
}

}  // namespace

PipelineSchedule lower_pipeline_communication(const PipelineSchedule& compute) {
  return lower_pipeline_communication(compute, unit_pipeline_costs(compute));
}

PipelineSchedule lower_pipeline_communication(const PipelineSchedule& compute, const PipelineCosts& costs, PipelineLoweringWork* work) {
  PipelineLoweringWork done;
  PipelineSchedule lowered = compute;
  // An already lowered schedule keeps its order (a hand-written one is the validator's to judge).
  if (!compute.has_communication()) lowered.actions = place_communication(compute);
  PipelineProgress progress(lowered, SendSemantics::rendezvous);
  if (!compute.has_communication()) {
    const Plan planned = plan(compute, costs);
    const auto repair = [&](const std::pair<std::int32_t, PipelineAction>& fix) {
      ++done.repairs;
      progress.reorder_remaining(fix.first, receive_first(progress.remaining(fix.first), fix.second, progress.dependencies(), planned));
    };
    while (!progress.run()) {
      // Two ranks sending to each other are a cycle of their own: repairing each such pair alone gives
      // what the search below would, without walking every rank at every stop (pairs are disjoint, and
      // a pair's repair depends on its two ranks only).
      std::set<std::int32_t> repaired;
      for (const auto& [one, other] : progress.take_crossed_transfers()) {
        if (repaired.contains(one.rank) || repaired.contains(other.rank)) continue;
        if (const auto fix = receive_to_post_first({one, other})) {
          repaired.insert({one.rank, other.rank});
          repair(*fix);
        }
      }
      if (!repaired.empty()) continue;
      ++done.searches;
      const std::optional<std::pair<std::int32_t, PipelineAction>> fix = receive_to_post_first(progress.blocked());
      if (!fix) break;
      repair(*fix);
    }
  }
  done.progress_work = progress.work();
  if (work) *work = done;
  lowered.actions.assign(progress.rank_actions().size(), {});
  for (std::size_t rank = 0; rank < lowered.actions.size(); ++rank) {
    lowered.actions[rank].assign(progress.rank_actions()[rank].begin(), progress.rank_actions()[rank].end());
  }
  return lowered;
}

}  // namespace ferry
