#include "schedule/pipeline_progress.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

namespace ferry {

const char* send_semantics_name(SendSemantics semantics) {
  return semantics == SendSemantics::buffered ? "buffered sends" : "rendezvous sends";
}

PipelineProgress::PipelineProgress(const PipelineSchedule& schedule, SendSemantics semantics)
    : dependencies_(schedule), semantics_(semantics), lists_(schedule.actions.size()), next_(schedule.actions.size(), 0) {
  for (std::size_t rank = 0; rank < schedule.actions.size(); ++rank) {
    for (const std::optional<PipelineAction>& action : schedule.actions[rank]) {
      if (action) lists_[rank].push_back(*action);
    }
  }
}

std::optional<PipelineAction> PipelineProgress::missing_input(const PipelineAction& action) const {
  for (const ActionInput& input : dependencies_.inputs(action)) {
    if (!done_.contains(input.action)) return input.action;
  }
  return std::nullopt;
}

std::optional<std::size_t> PipelineProgress::rendezvous_peer(std::size_t rank) const {
  const PipelineAction match = matching_communication(lists_[rank][next_[rank]]);
  const std::optional<std::int32_t> peer = dependencies_.rank_holding(match);
  if (!peer || static_cast<std::size_t>(*peer) == rank) return std::nullopt;
  const auto peer_rank = static_cast<std::size_t>(*peer);
  if (next_[peer_rank] >= lists_[peer_rank].size() || lists_[peer_rank][next_[peer_rank]] != match) return std::nullopt;
  return peer_rank;
}

void PipelineProgress::complete(std::size_t rank, const DoneCallback& on_done) {
  const PipelineAction& action = lists_[rank][next_[rank]];
  done_.insert(action);
  if (on_done) on_done(static_cast<std::int32_t>(rank), action);
  ++next_[rank];
}

bool PipelineProgress::try_step(std::size_t rank, const DoneCallback& on_done) {
  const PipelineAction& action = lists_[rank][next_[rank]];
  if (semantics_ == SendSemantics::rendezvous && action.is_communication()) {
    const std::optional<std::size_t> peer = rendezvous_peer(rank);
    if (!peer) return false;
    const std::size_t sender = is_send(action) ? rank : *peer;
    const std::size_t receiver = is_send(action) ? *peer : rank;
    if (missing_input(lists_[sender][next_[sender]])) return false;
    complete(sender, on_done);
    complete(receiver, on_done);
    return true;
  }
  if (missing_input(action)) return false;
  complete(rank, on_done);
  return true;
}

bool PipelineProgress::run(const DoneCallback& on_done) {
  bool moved = true;
  while (moved) {
    moved = false;
    for (std::size_t rank = 0; rank < lists_.size(); ++rank) {
      while (next_[rank] < lists_[rank].size() && try_step(rank, on_done)) moved = true;
    }
  }
  for (std::size_t rank = 0; rank < lists_.size(); ++rank) {
    if (next_[rank] < lists_[rank].size()) return false;
  }
  return true;
}

std::vector<BlockedRank> PipelineProgress::blocked() const {
  std::vector<BlockedRank> result;
  for (std::size_t rank = 0; rank < lists_.size(); ++rank) {
    if (next_[rank] >= lists_[rank].size()) continue;
    const PipelineAction& action = lists_[rank][next_[rank]];
    std::optional<PipelineAction> waits_for = missing_input(action);
    if (semantics_ == SendSemantics::rendezvous && action.is_communication() && (!waits_for || !is_send(action))) {
      waits_for = matching_communication(action);
    }
    // A rank stopped by nothing it needs is waiting for its rendezvous partner, which is itself stuck.
    const PipelineAction waited = waits_for.value_or(action);
    result.push_back({static_cast<std::int32_t>(rank), action, waited, dependencies_.rank_holding(waited)});
  }
  return result;
}

std::string describe_blocked_rank(const BlockedRank& blocked) {
  std::string text = "rank " + std::to_string(blocked.rank) + " waits at " + blocked.action.to_string() + " for " +
                     blocked.waits_for.to_string();
  if (!blocked.waits_for_rank) return text + ", which no rank runs";
  if (*blocked.waits_for_rank == blocked.rank) return text + ", which comes later on rank " + std::to_string(blocked.rank);
  return text + " on rank " + std::to_string(*blocked.waits_for_rank);
}

std::string PipelineProgress::describe_blocked() const {
  std::string text;
  for (const BlockedRank& each : blocked()) text += (text.empty() ? "" : "; ") + describe_blocked_rank(each);
  return text;
}

std::span<const PipelineAction> PipelineProgress::remaining(std::int32_t rank) const {
  const std::vector<PipelineAction>& list = lists_.at(static_cast<std::size_t>(rank));
  return std::span<const PipelineAction>(list).subspan(next_[static_cast<std::size_t>(rank)]);
}

void PipelineProgress::reorder_remaining(std::int32_t rank, const std::vector<PipelineAction>& reordered) {
  const std::span<const PipelineAction> all = remaining(rank);
  bool permutation = reordered.size() <= all.size();
  if (permutation) {
    const std::span<const PipelineAction> current = all.first(reordered.size());
    std::unordered_map<PipelineAction, int, PipelineActionHash> balance;
    for (const PipelineAction& action : current) ++balance[action];
    for (const PipelineAction& action : reordered) --balance[action];
    permutation = std::all_of(balance.begin(), balance.end(), [](const auto& entry) { return entry.second == 0; });
  }
  if (!permutation) {
    throw std::logic_error("reorder_remaining: the new order of rank " + std::to_string(rank) + " is not a reordering of its remaining actions");
  }
  std::vector<PipelineAction>& list = lists_[static_cast<std::size_t>(rank)];
  std::copy(reordered.begin(), reordered.end(), list.begin() + static_cast<std::ptrdiff_t>(next_[static_cast<std::size_t>(rank)]));
}

}  // namespace ferry
