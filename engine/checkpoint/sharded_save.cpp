#include "engine/checkpoint/sharded_save.h"

#include <exception>
#include <filesystem>
#include <functional>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_directory.h"

namespace ferry {
namespace {

// Rank 0's `text` on every rank (its length, then its bytes).
std::string broadcast_text(Communicator& world, std::string text) {
  std::uint64_t size = text.size();
  world.broadcast(&size, sizeof size, 0);
  text.resize(size);
  if (size > 0) world.broadcast(text.data(), size, 0);
  return text;
}

// What `work` threw ("" when it returned).
std::string failure_of(const std::function<void()>& work) {
  try {
    work();
    return {};
  } catch (const std::exception& error) {
    return error.what();
  }
}

// The ranks' failures as one message ("" when every rank succeeded).
std::string describe_failures(const std::vector<std::string>& failures) {
  std::string text;
  for (std::size_t rank = 0; rank < failures.size(); ++rank) {
    if (failures[rank].empty()) continue;
    text += (text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + ": " + failures[rank];
  }
  return text;
}

// The outcome rank 0 sends: '+' and the directory, or '-' and the error.
constexpr char kSaved = '+', kFailed = '-';

}  // namespace

std::string save_sharded_checkpoint(Communicator& world, const std::string& root, std::int64_t step, std::int64_t keep,
                                    const GptConfig& config, const OptimizerSnapshot& shard, const std::vector<std::string>& skipped,
                                    const TrainerState& state) {
  return save_sharded_checkpoint(world, root, step, keep, config, export_of(shard), skipped, state);
}

std::string save_sharded_checkpoint(Communicator& world, const std::string& root, std::int64_t step, std::int64_t keep,
                                    const GptConfig& config, const ShardExport& shard, const std::vector<std::string>& skipped,
                                    const TrainerState& state) {
  // Three collectives in this order on every rank, whatever fails: the staging directory ("" when it
  // could not be made), every rank's failure to rank 0, the outcome.
  bool announced = false, collected = false;
  std::string outcome;
  if (world.rank() == 0) {
    try {
      const std::string directory = save_checkpoint_step(root, step, keep, [&](const std::string& staging) {
        const std::string created = failure_of([&] { create_checkpoint_files(staging, config, shard.outline.steps); });
        broadcast_text(world, created.empty() ? staging : std::string());
        announced = true;
        const std::string own = created.empty() ? failure_of([&] { write_checkpoint_shard(staging, shard, skipped); }) : std::string();
        const std::string failures = describe_failures(world.gather_strings(own, 0));
        collected = true;
        if (!created.empty()) throw CheckpointError("cannot create the checkpoint's files: " + created);
        if (!failures.empty()) throw CheckpointError("a rank could not write its shard of the checkpoint (" + failures + ")");
        finish_checkpoint(staging, config, state, shard.outline.steps);
      });
      outcome = kSaved + directory;
    } catch (const std::exception& error) {
      outcome = kFailed + ("checkpoint of step " + std::to_string(step) + " under '" + root + "' not saved: " + error.what() +
                           "; the previous checkpoint is unchanged");
    }
    if (!announced) broadcast_text(world, {});
    if (!collected) world.gather_strings({}, 0);
    outcome = broadcast_text(world, outcome);
  } else {
    const std::string staging = broadcast_text(world, {});
    std::string own = staging.empty() ? std::string() : failure_of([&] { write_checkpoint_shard(staging, shard, skipped); });
    std::error_code error;
    if (!own.empty() && !std::filesystem::is_directory(staging, error)) {
      own += " (rank 0 made '" + staging + "', which this rank does not see: --save must name a filesystem every rank shares)";
    }
    world.gather_strings(own, 0);
    outcome = broadcast_text(world, {});
  }
  if (outcome.empty() || outcome.front() != kSaved) throw CheckpointError(outcome.empty() ? "checkpoint not saved" : outcome.substr(1));
  return outcome.substr(1);
}

}  // namespace ferry
