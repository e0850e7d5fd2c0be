// Checkpoints: a save that fails part-way leaves the previous checkpoint whole and resumable, and a
// loaded checkpoint restores parameters, moments and trainer state exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/train/checkpoint.h"
#include "models/gpt_weights.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

GptConfig tiny() { return GptConfig{"tiny", 1, 8, 2, 11, 4}; }

std::string fresh_directory(const std::string& name) {
  const fs::path path = fs::path(::testing::TempDir()) / (name + "." + std::to_string(::getpid()));
  fs::remove_all(path);
  return path.string();
}

TEST(Checkpoint, RoundTripRestoresWeightsMomentsAndState) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, tiny(), DType::f32);
  initialize_gpt_parameters(model.parameters(), tiny(), 7);
  AdamWOptimizer optimizer(model.parameters(), model.gradients(), {});
  optimizer.states()[0].first_moment.copy_from_host(std::vector<float>(11 * 8, 0.25f).data());
  optimizer.set_steps_taken(3);
  const std::string directory = fresh_directory("round_trip");
  save_checkpoint(directory, model, optimizer, TrainerState{3, 17, 5, {{"batch", 2}}});

  GptModel restored(*device, tiny(), DType::f32);
  AdamWOptimizer restored_optimizer(restored.parameters(), restored.gradients(), {});
  const TrainerState state = load_checkpoint(directory, restored, restored_optimizer);
  EXPECT_EQ(state.step, 3);
  EXPECT_EQ(state.data_position, 17u);
  EXPECT_EQ(state.seed, 5u);
  EXPECT_EQ(state.run["batch"], 2);
  EXPECT_EQ(restored_optimizer.steps_taken(), 3);
  EXPECT_EQ(copy_to_host_f32(restored.parameters().wte), copy_to_host_f32(model.parameters().wte));
  EXPECT_EQ(copy_to_host_f32(restored_optimizer.states()[0].first_moment), std::vector<float>(11 * 8, 0.25f));
  fs::remove_all(directory);
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpointWhole) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, tiny(), DType::f32);
  initialize_gpt_parameters(model.parameters(), tiny(), 7);
  AdamWOptimizer optimizer(model.parameters(), model.gradients(), {});
  const std::string directory = fresh_directory("failed_save");
  save_checkpoint(directory, model, optimizer, TrainerState{2, 4, 1, {}});

  // The optimizer file's temporary name is taken by a directory: its creation fails (even as root).
  const fs::path blocker = fs::path(directory) / ("optimizer.safetensors.tmp." + std::to_string(::getpid()));
  fs::create_directory(blocker);
  initialize_gpt_parameters(model.parameters(), tiny(), 8);
  EXPECT_THROW(save_checkpoint(directory, model, optimizer, TrainerState{9, 9, 1, {}}), FileError);
  fs::remove(blocker);

  EXPECT_TRUE(fs::exists(fs::path(directory) / "DONE"));
  for (const auto& entry : fs::directory_iterator(directory)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "left behind: " << entry.path();
  }
  GptModel restored(*device, tiny(), DType::f32);
  AdamWOptimizer restored_optimizer(restored.parameters(), restored.gradients(), {});
  EXPECT_EQ(load_checkpoint(directory, restored, restored_optimizer).step, 2);
  GptModel original(*device, tiny(), DType::f32);
  initialize_gpt_parameters(original.parameters(), tiny(), 7);
  EXPECT_EQ(copy_to_host_f32(restored.parameters().wte), copy_to_host_f32(original.parameters().wte));
  fs::remove_all(directory);
}

}  // namespace
}  // namespace ferry
