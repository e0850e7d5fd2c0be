#include "schedule/pipeline_progress.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

namespace ferry {

const char* send_semantics_name(SendSemantics semantics) {
  return semantics == SendSemantics::buffered ? "buffered sends" : "rendezvous sends";
}

PipelineProgress::PipelineProgress(const PipelineSchedule& schedule, SendSemantics semantics)
    : dependencies_(schedule),
      semantics_(semantics),
      lists_(schedule.actions.size()),
      next_(schedule.actions.size(), 0),
      queued_(schedule.actions.size(), 0) {
  for (std::size_t rank = 0; rank < schedule.actions.size(); ++rank) {
    for (const std::optional<PipelineAction>& action : schedule.actions[rank]) {
      if (action) lists_[rank].push_back(*action);
    }
    if (!lists_[rank].empty()) ++unfinished_;
    wake(rank);
  }
}

void PipelineProgress::wake(std::size_t rank) {
  if (queued_[rank]) return;
  queued_[rank] = 1;
  ready_.push_back(rank);
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
  if (const auto waiters = waiting_.find(action); waiters != waiting_.end()) {
    for (const std::size_t waiter : waiters->second) wake(waiter);
    waiting_.erase(waiters);
  }
  if (++next_[rank] == lists_[rank].size()) --unfinished_;
}

// Where a stopped rank will be woken: by the input it misses, or (a transfer whose partner is not there
// yet) by the partner, which completes both when it arrives.
void PipelineProgress::note_blocked(std::size_t rank) {
  const PipelineAction& action = lists_[rank][next_[rank]];
  if (semantics_ == SendSemantics::rendezvous && action.is_communication()) {
    if (const std::optional<std::size_t> peer = rendezvous_peer(rank)) {
      const std::size_t sender = is_send(action) ? rank : *peer;
      waiting_[*missing_input(lists_[sender][next_[sender]])].push_back(rank);
      return;
    }
    const std::optional<std::int32_t> holder = dependencies_.rank_holding(matching_communication(action));
    if (!holder || static_cast<std::size_t>(*holder) == rank) return;
    const auto peer = static_cast<std::size_t>(*holder);
    if (next_[peer] >= lists_[peer].size()) return;
    const PipelineAction& theirs = lists_[peer][next_[peer]];
    if (theirs.is_communication() && dependencies_.rank_holding(matching_communication(theirs)) == static_cast<std::int32_t>(rank)) {
      crossed_.emplace_back(rank, peer);
    }
    return;
  }
  if (const std::optional<PipelineAction> input = missing_input(action)) waiting_[*input].push_back(rank);
}

bool PipelineProgress::try_step(std::size_t rank, const DoneCallback& on_done) {
  ++work_;
  const PipelineAction& action = lists_[rank][next_[rank]];
  if (semantics_ == SendSemantics::rendezvous && action.is_communication()) {
    const std::optional<std::size_t> peer = rendezvous_peer(rank);
    if (!peer) return false;
    const std::size_t sender = is_send(action) ? rank : *peer;
    const std::size_t receiver = is_send(action) ? *peer : rank;
    if (missing_input(lists_[sender][next_[sender]])) return false;
    complete(sender, on_done);
    complete(receiver, on_done);
    wake(*peer);
    return true;
  }
  if (missing_input(action)) return false;
  complete(rank, on_done);
  return true;
}

bool PipelineProgress::run(const DoneCallback& on_done) {
  while (!ready_.empty()) {
    const std::size_t rank = ready_.front();
    ready_.pop_front();
    queued_[rank] = 0;
    while (next_[rank] < lists_[rank].size() && try_step(rank, on_done)) {
    }
    if (next_[rank] < lists_[rank].size()) note_blocked(rank);
  }
  return unfinished_ == 0;
}

std::optional<BlockedRank> PipelineProgress::blocked(std::int32_t rank) const {
  const auto index = static_cast<std::size_t>(rank);
  if (next_.at(index) >= lists_[index].size()) return std::nullopt;
  ++work_;
  const PipelineAction& action = lists_[index][next_[index]];
  std::optional<PipelineAction> waits_for = missing_input(action);
  if (semantics_ == SendSemantics::rendezvous && action.is_communication() && (!waits_for || !is_send(action))) {
    waits_for = matching_communication(action);
  }
  // A rank stopped by nothing it needs is waiting for its rendezvous partner, which is itself stuck.
  const PipelineAction waited = waits_for.value_or(action);
  return BlockedRank{rank, action, waited, dependencies_.rank_holding(waited)};
}

std::vector<BlockedRank> PipelineProgress::blocked() const {
  std::vector<BlockedRank> result;
  for (std::size_t rank = 0; rank < lists_.size(); ++rank) {
    if (const std::optional<BlockedRank> each = blocked(static_cast<std::int32_t>(rank))) result.push_back(*each);
  }
  return result;
}

std::vector<std::pair<BlockedRank, BlockedRank>> PipelineProgress::take_crossed_transfers() {
  std::vector<std::pair<BlockedRank, BlockedRank>> result;
  for (const auto& [first, second] : crossed_) {
    if (queued_[first] || queued_[second]) continue;  // one of them may move again
    const std::optional<BlockedRank> one = blocked(static_cast<std::int32_t>(first)), other = blocked(static_cast<std::int32_t>(second));
    if (!one || !other || one->waits_for_rank != other->rank || other->waits_for_rank != one->rank) continue;
    result.emplace_back(*one, *other);
  }
  crossed_.clear();
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
  wake(static_cast<std::size_t>(rank));
}

}  // namespace ferry
