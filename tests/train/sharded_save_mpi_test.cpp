// The collective checkpoint save under mpirun: every rank writes its share of one whole-model state
// and the files equal one process's; a rank that cannot write its shard fails the save on every rank
// with an error naming it, leaving the previous checkpoint as `latest` and nothing staged behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_directory.h"
#include "engine/checkpoint/sharded_save.h"
#include "engine/core/atomic_file.h"
#include "models/gpt_weights.h"
#include "tests/comm/mpi_test_world.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

const GptConfig kConfig{"tiny", 2, 8, 2, 11, 4};

// One root for the job (rank 0's process id), empty at the start.
std::string job_directory(Communicator& world, const std::string& name) {
  std::int64_t pid = ::getpid();
  world.broadcast(&pid, sizeof pid, 0);
  const std::string path = (fs::path(::testing::TempDir()) / (name + "." + std::to_string(pid))).string();
  if (world.rank() == 0) fs::remove_all(path);
  world.barrier();
  return path;
}

// The same whole state on every rank: a tiny model's parameters and made-up moments.
OptimizerSnapshot whole_state(Device& device) {
  GptModel model(device, kConfig, DType::f32);
  initialize_gpt_parameters(model.parameters(), kConfig, 7);
  OptimizerSnapshot whole = make_device_optimizer(model, {})->shard();
  for (std::size_t i = 0; i < whole.master.size(); ++i) {
    whole.first_moment[i] = 0.25f * static_cast<float>(i);
    whole.second_moment[i] = 3.0f + static_cast<float>(i);
  }
  whole.steps = 6;
  return whole;
}

// Rank r's equal share of `whole` (the last share takes the rest).
OptimizerSnapshot share_of(const OptimizerSnapshot& whole, int rank, int ranks) {
  const auto total = static_cast<std::int64_t>(whole.master.size());
  const std::int64_t begin = total * rank / ranks, end = total * (rank + 1) / ranks;
  OptimizerSnapshot shard = whole;
  shard.share = FlatRange{begin, end};
  for (std::vector<float>* values : {&shard.master, &shard.first_moment, &shard.second_moment}) {
    *values = std::vector<float>(values->begin() + begin, values->begin() + end);
  }
  return shard;
}

TrainerState state_at(std::int64_t step) {
  TrainerState state;
  state.step = step;
  state.run = nlohmann::json::object();
  return state;
}

TEST(ShardedSave, EveryRanksShareMakesTheOneProcessFiles) {
  Communicator& world = testing::world();
  auto device = create_device(DeviceOptions{});
  const OptimizerSnapshot whole = whole_state(*device);
  const std::string root = job_directory(world, "sharded_save");
  const std::string saved =
      save_sharded_checkpoint(world, root, 6, 0, kConfig, share_of(whole, world.rank(), world.size()), {}, state_at(6));
  EXPECT_EQ(saved, checkpoint_step_directory(root, 6));
  if (world.rank() == 0) {
    const std::string one = root + "/one";
    create_checkpoint_files(one, kConfig, whole.steps);
    write_checkpoint_shard(one, whole, {});
    finish_checkpoint(one, kConfig, state_at(6), whole.steps);
    for (const char* file : {"model.safetensors", "optimizer.safetensors", "DONE"}) {
      EXPECT_EQ(read_text_file((fs::path(one) / file).string()), read_text_file((fs::path(saved) / file).string())) << file;
    }
    EXPECT_EQ(resolve_checkpoint(root), saved);
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(root);
}

TEST(ShardedSave, ARankThatCannotWriteFailsTheSaveOnEveryRank) {
  Communicator& world = testing::world();
  auto device = create_device(DeviceOptions{});
  const OptimizerSnapshot whole = whole_state(*device);
  const std::string root = job_directory(world, "sharded_failure");
  save_sharded_checkpoint(world, root, 2, 0, kConfig, share_of(whole, world.rank(), world.size()), {}, state_at(2));
  OptimizerSnapshot shard = share_of(whole, world.rank(), world.size());
  if (world.rank() == 1) {  // tensors the files lack: its first write throws
    for (std::string& name : shard.names) name = "lm_head.bias";
  }
  try {
    save_sharded_checkpoint(world, root, 3, 0, kConfig, shard, {}, state_at(3));
    ADD_FAILURE() << "the save succeeded on rank " << world.rank();
  } catch (const CheckpointError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank 1: "), std::string::npos) << message;
    EXPECT_NE(message.find("lm_head.bias"), std::string::npos) << message;
    EXPECT_EQ(message.find("rank 0: "), std::string::npos) << message;
  }
  if (world.rank() == 0) {
    EXPECT_EQ(resolve_checkpoint(root), checkpoint_step_directory(root, 2));
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(root)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000002"}));
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace ferry
