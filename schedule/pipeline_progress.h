// Runs a schedule's per-rank lists in dependency order, without time: each rank does its next action
// once that action's inputs are done. It finds deadlocks and says which action each rank is stuck at and
// what it waits for; the validator, the simulator and the lowering's deadlock repair are built on it.
// Work is linear in the actions: a blocked rank is woken by the action it waits for, never rescanned.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "schedule/pipeline_dependencies.h"
#include "schedule/pipeline_schedule.h"

namespace ferry {

// buffered: a send completes at once (the transport keeps the data until it is received).
// rendezvous: a send and its receive complete together, once both ranks have reached them (a blocking
// send without buffering, as NCCL's send/recv can behave): the stricter model, where deadlocks show.
enum class SendSemantics : std::uint8_t { buffered, rendezvous };
const char* send_semantics_name(SendSemantics semantics);  // "buffered sends", "rendezvous sends"

struct BlockedRank {
  std::int32_t rank = 0;
  PipelineAction action;      // the rank's next action, which cannot run
  PipelineAction waits_for;   // an input not done yet, or (rendezvous) the peer's matching action
  std::optional<std::int32_t> waits_for_rank;  // the rank holding `waits_for`; nullopt: no rank has it
};

// "rank 0 waits at 0RECV_B1 for 1SEND_B1 on rank 1" (or "..., which no rank runs", "..., which comes later on rank 0").
std::string describe_blocked_rank(const BlockedRank& blocked);

class PipelineProgress {
 public:
  PipelineProgress(const PipelineSchedule& schedule, SendSemantics semantics);

  // Runs until every rank has finished or none can move, calling `on_done` for each action as it
  // completes (inputs always before the actions that need them; under rendezvous a send just before
  // its receive). Can be called again after reorder_remaining. Returns true when every rank finished.
  using DoneCallback = std::function<void(std::int32_t rank, const PipelineAction& action)>;
  bool run(const DoneCallback& on_done = {});

  std::vector<BlockedRank> blocked() const;
  std::optional<BlockedRank> blocked(std::int32_t rank) const;  // nullopt when the rank has finished
  // Rendezvous only: pairs of ranks each stopped at a transfer with the other that the other is not at
  // (neither moves until one of them reorders), as found when the second of them stopped; each pair is
  // returned once while both are still there. The lowering repairs these without a search of all ranks.
  std::vector<std::pair<BlockedRank, BlockedRank>> take_crossed_transfers();
  // "rank 0 waits at 0RECV_B1 for 1SEND_B1 on rank 1; rank 1 waits at ..."
  std::string describe_blocked() const;

  // The actions `rank` has not run yet, in order (a view, valid until the next reorder), and a
  // reordering of their first reordered.size() to run instead (the lowering posts a receive before a
  // send that would otherwise wait forever; the rest keep their order). Throws std::logic_error when
  // `reordered` is not a permutation of that prefix. Both cost the prefix's length, not the list's, so
  // lowering stays near linear in the actions.
  std::span<const PipelineAction> remaining(std::int32_t rank) const;
  void reorder_remaining(std::int32_t rank, const std::vector<PipelineAction>& reordered);

  // Ranks' next actions tried plus stuck ranks described: the work done so far, linear in the actions
  // (a stuck rank is woken by what it waits for, never tried again in between).
  std::int64_t work() const { return work_; }

  // The lists with bubbles dropped, as run (including any reordering).
  const std::vector<std::vector<PipelineAction>>& rank_actions() const { return lists_; }
  const PipelineDependencies& dependencies() const { return dependencies_; }

 private:
  bool try_step(std::size_t rank, const DoneCallback& on_done);
  void wake(std::size_t rank);
  void note_blocked(std::size_t rank);
  std::optional<PipelineAction> missing_input(const PipelineAction& action) const;
  std::optional<std::size_t> rendezvous_peer(std::size_t rank) const;  // peer posting the match
  void complete(std::size_t rank, const DoneCallback& on_done);

  PipelineDependencies dependencies_;
  SendSemantics semantics_;
  std::vector<std::vector<PipelineAction>> lists_;
  std::vector<std::size_t> next_;  // [rank] index of the next action in lists_[rank]
  PipelineActionSet done_;
  std::deque<std::size_t> ready_;  // ranks whose next action may run
  std::vector<char> queued_;       // [rank] in ready_
  std::unordered_map<PipelineAction, std::vector<std::size_t>, PipelineActionHash> waiting_;  // action -> ranks waiting for it
  std::size_t unfinished_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> crossed_;  // ranks stopped at transfers with each other
  mutable std::int64_t work_ = 0;
};

}  // namespace ferry
