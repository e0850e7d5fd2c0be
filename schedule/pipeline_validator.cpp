#include "schedule/pipeline_validator.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace ferry {
namespace {

struct Location {
  std::int32_t rank = 0;
  std::size_t position = 0;  // index in the rank's list, bubbles counted
};
using Locations = std::unordered_map<PipelineAction, Location, PipelineActionHash>;

std::string on_rank(std::int32_t rank, const PipelineAction& action) {
  return "rank " + std::to_string(rank) + ": " + action.to_string();
}

// Problems named one by one; past this many, check_compute counts them.
constexpr std::size_t kMostNamedProblems = 200;

bool check_shape(const PipelineSchedule& schedule, std::vector<std::string>& problems) {
  if (const std::string size = schedule_size_problem(schedule.ranks, schedule.stages, schedule.micro_batches); !size.empty()) {
    problems.push_back(size);
    return false;
  }
  if (schedule.ranks < 1) problems.push_back("the schedule has " + std::to_string(schedule.ranks) + " ranks: it needs at least 1");
  if (schedule.micro_batches < 1) {
    problems.push_back("the schedule has " + std::to_string(schedule.micro_batches) + " micro-batches: it needs at least 1");
  }
  if (schedule.ranks >= 1 && (schedule.stages < schedule.ranks || schedule.stages % schedule.ranks != 0)) {
    problems.push_back("the schedule has " + std::to_string(schedule.stages) + " stages for " + std::to_string(schedule.ranks) +
                       " ranks: stages must be a multiple of the ranks (V model chunks per rank)");
  }
  if (schedule.actions.size() != static_cast<std::size_t>(std::max(schedule.ranks, 0))) {
    problems.push_back("the schedule has " + std::to_string(schedule.actions.size()) + " rank lists for " +
                       std::to_string(schedule.ranks) + " ranks: give one list per rank");
  }
  return problems.empty();
}

// Range, ownership and pipeline ends of every action; records each action's first location and reports repeats.
Locations check_actions(const PipelineSchedule& schedule, std::vector<std::string>& problems) {
  Locations locations;
  const std::int32_t last_stage = schedule.stages - 1;
  for (std::size_t rank_index = 0; rank_index < schedule.actions.size(); ++rank_index) {
    const auto rank = static_cast<std::int32_t>(rank_index);
    const RankActions& list = schedule.actions[rank_index];
    for (std::size_t position = 0; position < list.size(); ++position) {
      if (!list[position]) continue;
      const PipelineAction& action = *list[position];
      const std::string where = on_rank(rank, action);
      if (action.stage < 0 || action.stage > last_stage) {
        problems.push_back(where + " names stage " + std::to_string(action.stage) + ", but the schedule has stages 0.." +
                           std::to_string(last_stage));
        continue;
      }
      if (action.micro_batch < 0 || action.micro_batch >= schedule.micro_batches) {
        problems.push_back(where + " names micro-batch " + std::to_string(action.micro_batch) +
                           ", but the schedule has micro-batches 0.." + std::to_string(schedule.micro_batches - 1));
      }
      if (schedule.rank_of_stage(action.stage) != rank) {
        problems.push_back(where + " runs stage " + std::to_string(action.stage) + ", which lives on rank " +
                           std::to_string(schedule.rank_of_stage(action.stage)) + " (stage s on rank s % " +
                           std::to_string(schedule.ranks) + ")");
      }
      if (action.is_communication()) {
        const PipelineAction peer = matching_communication(action);
        if (peer.stage < 0 || peer.stage > last_stage) {
          problems.push_back(where + " talks to stage " + std::to_string(peer.stage) + ", past the pipeline's ends (0.." +
                             std::to_string(last_stage) + ")");
        } else if (schedule.rank_of_stage(peer.stage) == schedule.rank_of_stage(action.stage)) {
          problems.push_back(where + " talks to stage " + std::to_string(peer.stage) +
                             " on the same rank: the executor hands that tensor over locally, remove it");
        }
      }
      const auto [found, inserted] = locations.try_emplace(action, Location{rank, position});
      if (!inserted) {
        problems.push_back(where + " appears again (first on rank " + std::to_string(found->second.rank) + " at position " +
                           std::to_string(found->second.position) + "): each action runs once");
      }
    }
  }
  return locations;
}

// Every stage runs F once per micro-batch and either B, or I and W; F before B or I on the stage, W after its I.
void check_compute(const PipelineSchedule& schedule, const Locations& locations, std::vector<std::string>& problems) {
  // A schedule that declares millions of micro-batches and lists three actions lacks millions: name the
  // first few, then count the rest (their text alone would take gigabytes).
  std::int64_t unnamed = 0;
  const auto report = [&](auto&& describe) {
    if (problems.size() < kMostNamedProblems) {
      problems.push_back(describe());
    } else {
      ++unnamed;
    }
  };
  const auto find = [&](std::int32_t stage, PipelineActionType type, std::int32_t micro_batch) -> const Location* {
    const auto found = locations.find(PipelineAction{stage, type, micro_batch});
    return found == locations.end() ? nullptr : &found->second;
  };
  for (std::int32_t stage = 0; stage < schedule.stages; ++stage) {
    const std::string where = "stage " + std::to_string(stage) + " (rank " + std::to_string(schedule.rank_of_stage(stage)) + ")";
    for (std::int32_t micro_batch = 0; micro_batch < schedule.micro_batches; ++micro_batch) {
      const auto name = [&](const char* type) { return std::to_string(stage) + type + std::to_string(micro_batch); };
      const Location* forward = find(stage, PipelineActionType::forward, micro_batch);
      const Location* backward = find(stage, PipelineActionType::backward, micro_batch);
      const Location* input = find(stage, PipelineActionType::backward_input, micro_batch);
      const Location* weight = find(stage, PipelineActionType::backward_weight, micro_batch);
      if (!forward) report([&] { return where + " has no " + name("F") + ": each stage runs F once per micro-batch"; });
      if (backward && (input || weight)) {
        report([&] { return where + " runs " + name("B") + " and " + (input ? name("I") : name("W")) +
                           ": one micro-batch's backward is either B or I and W"; });
      } else if (!backward && !input) {
        report([&] { return where + " has no " + name("B") + " (or " + name("I") + " and " + name("W") +
                           "): each stage runs one backward per micro-batch"; });
      } else if (input && !weight) {
        report([&] { return where + " runs " + name("I") + " but no " + name("W") + ": every I needs its W"; });
      } else if (weight && !input) {
        report([&] { return where + " runs " + name("W") + " but no " + name("I") + ": a W follows its I"; });
      }
      const Location* gradient = backward ? backward : input;
      if (forward && gradient && gradient->rank == forward->rank && gradient->position < forward->position) {
        report([&] { return "rank " + std::to_string(gradient->rank) + ": " + (backward ? name("B") : name("I")) +
                           " comes before " + name("F") + ": a stage's backward follows its forward"; });
      }
      if (input && weight && weight->rank == input->rank && weight->position < input->position) {
        report([&] { return "rank " + std::to_string(weight->rank) + ": " + name("W") + " comes before " + name("I") +
                           ": a W follows its I"; });
      }
    }
  }
  if (unnamed > 0) problems.push_back("... and " + std::to_string(unnamed) + " more missing or misplaced compute actions");
}

// A lowered schedule's compute action has its receive before it and its send after it (on its own rank)
// wherever the neighbouring stage is on another rank; each send and receive has its counterpart.
void check_transfers(const PipelineSchedule& schedule, const PipelineAction& action, const Location& location,
                     const Locations& locations, std::vector<std::string>& problems) {
  const std::string where = on_rank(location.rank, action);
  if (action.is_communication()) {
    const PipelineAction match = matching_communication(action);
    if (match.stage >= 0 && match.stage < schedule.stages && !locations.contains(match)) {
      problems.push_back(where + " has no matching " + match.to_string() + " on rank " +
                         std::to_string(schedule.rank_of_stage(match.stage)) +
                         ": every send needs one receive and every receive one send");
    }
    return;
  }
  const auto require = [&](const std::optional<PipelineAction>& communication, bool before) {
    if (!communication) return;
    const std::int32_t peer_stage = matching_communication(*communication).stage;
    if (schedule.rank_of_stage(peer_stage) == location.rank) return;
    const auto found = locations.find(*communication);
    const std::string rule = before ? " before it (its input comes from stage " : " after it (its output goes to stage ";
    if (found == locations.end() || found->second.rank != location.rank) {
      problems.push_back(where + " needs " + communication->to_string() + rule + std::to_string(peer_stage) + " on rank " +
                         std::to_string(schedule.rank_of_stage(peer_stage)) + ")");
    } else if ((found->second.position < location.position) != before) {
      problems.push_back(where + " needs " + communication->to_string() + rule + std::to_string(peer_stage) +
                         "), but it comes " + (before ? "after" : "before"));
    }
  };
  require(input_receive(action, schedule.stages), true);
  require(output_send(action, schedule.stages), false);
}

// Per ordered pair of ranks, the sends in the sender's order against the receives in the receiver's
// order: the first place they differ.
void check_pair_order(const PipelineSchedule& schedule, const Locations& locations, std::vector<std::string>& problems) {
  std::map<std::pair<std::int32_t, std::int32_t>, std::pair<std::vector<PipelineAction>, std::vector<PipelineAction>>> pairs;
  for (std::size_t rank = 0; rank < schedule.actions.size(); ++rank) {
    for (const std::optional<PipelineAction>& action : schedule.actions[rank]) {
      if (!action || !action->is_communication()) continue;
      const PipelineAction match = matching_communication(*action);
      const auto found = locations.find(match);
      if (found == locations.end()) continue;
      const auto self = static_cast<std::int32_t>(rank);
      if (is_send(*action)) {
        pairs[{self, found->second.rank}].first.push_back(*action);
      } else {
        pairs[{found->second.rank, self}].second.push_back(match);
      }
    }
  }
  for (const auto& [ranks, messages] : pairs) {
    const auto& [sent, received] = messages;
    for (std::size_t index = 0; index < std::min(sent.size(), received.size()); ++index) {
      if (sent[index] == received[index]) continue;
      problems.push_back("rank " + std::to_string(ranks.second) + ": " + matching_communication(received[index]).to_string() +
                         " is posted where rank " + std::to_string(ranks.first) + " sends " + sent[index].to_string() +
                         ": sends and receives between two ranks must come in the same order");
      break;
    }
  }
}

void check_communication(const PipelineSchedule& schedule, const Locations& locations, std::vector<std::string>& problems) {
  for (std::size_t rank = 0; rank < schedule.actions.size(); ++rank) {
    for (std::size_t position = 0; position < schedule.actions[rank].size(); ++position) {
      const std::optional<PipelineAction>& action = schedule.actions[rank][position];
      if (!action) continue;
      const auto found = locations.find(*action);
      // Out-of-range actions and repeats were reported already.
      if (found == locations.end() || found->second.rank != static_cast<std::int32_t>(rank) || found->second.position != position) {
        continue;
      }
      check_transfers(schedule, *action, found->second, locations, problems);
    }
  }
  check_pair_order(schedule, locations, problems);
}

void check_progress(const PipelineSchedule& schedule, SendSemantics semantics, std::vector<std::string>& problems) {
  PipelineProgress progress(schedule, semantics);
  if (progress.run()) return;
  for (const BlockedRank& each : progress.blocked()) {
    problems.push_back(describe_blocked_rank(each) + ": the schedule is not progressing (" + send_semantics_name(semantics) + ")");
  }
}

}  // namespace

ScheduleValidation validate_pipeline_schedule(const PipelineSchedule& schedule, SendSemantics semantics) {
  ScheduleValidation validation;
  if (!check_shape(schedule, validation.problems)) return validation;
  const Locations locations = check_actions(schedule, validation.problems);
  check_compute(schedule, locations, validation.problems);
  if (schedule.has_communication()) check_communication(schedule, locations, validation.problems);
  check_progress(schedule, semantics, validation.problems);
  return validation;
}

ScheduleValidation validate_pipeline_schedule(const PipelineSchedule& schedule) {
  ScheduleValidation validation = validate_pipeline_schedule(schedule, SendSemantics::buffered);
  // Rendezvous sends only add deadlocks a buffered run does not have; look for them once the rest is sound.
  if (validation.ok() && schedule.has_communication()) validation = validate_pipeline_schedule(schedule, SendSemantics::rendezvous);
  return validation;
}

}  // namespace ferry
