// Checkpoints: a save that fails part-way leaves the previous checkpoint whole and resumable (in its
// directory and under a save root's `latest`), and a loaded checkpoint restores parameters, moments and
// trainer state exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_directory.h"
#include "engine/checkpoint/save_root_lock.h"
#include "engine/core/atomic_file.h"
#include "engine/core/device.h"
#include "engine/core/safetensors.h"
#include "engine/optim/training_optimizer.h"
#include "models/gpt_weights.h"
#include "tests/models/tiny_gpt_config.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

GptConfig tiny() { return GptConfig{"tiny", 1, 8, 2, 11, 4}; }

std::string fresh_directory(const std::string& name) {
  const fs::path path = fs::path(::testing::TempDir()) / (name + "." + std::to_string(::getpid()));
  fs::remove_all(path);
  return path.string();
}

TrainerState trainer_state(std::int64_t step, std::uint64_t position, std::uint64_t seed, const nlohmann::json& run) {
  TrainerState state;
  state.step = step;
  state.data_position = position;
  state.seed = seed;
  state.run = run;
  return state;
}

TEST(Checkpoint, RoundTripRestoresWeightsMomentsAndState) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, tiny(), DType::f32);
  initialize_gpt_parameters(model.parameters(), tiny(), 7);
  const auto optimizer = make_device_optimizer(model, {});
  OptimizerSnapshot values = optimizer->shard();
  std::fill_n(values.first_moment.begin(), 11 * 8, 0.25f);  // wte's first moment
  values.steps = 3;
  optimizer->restore(values);
  const std::string directory = fresh_directory("round_trip");
  TrainerState saved = trainer_state(3, 17, 5, {{"batch", 2}});
  saved.optimizer.schedule.peak = 5e-4;
  saved.optimizer.schedule.decay_steps = 40;
  saved.loss_scaler = LossScalerState{1024, 1, 2, 3, 4, 5};
  save_checkpoint(directory, model, *optimizer, saved);

  GptModel restored(*device, tiny(), DType::f32);
  const auto restored_optimizer = make_device_optimizer(restored, {});
  const TrainerState state = load_checkpoint(directory, restored, *restored_optimizer);
  EXPECT_EQ(state.step, 3);
  EXPECT_EQ(state.data_position, 17u);
  EXPECT_EQ(state.seed, 5u);
  EXPECT_EQ(state.run["batch"], 2);
  EXPECT_EQ(state.optimizer.to_json(), saved.optimizer.to_json());
  ASSERT_TRUE(state.loss_scaler.has_value());
  EXPECT_EQ(state.loss_scaler->to_json(), saved.loss_scaler->to_json());
  EXPECT_EQ(restored_optimizer->steps_taken(), 3);
  EXPECT_EQ(copy_to_host_f32(restored.parameters().wte), copy_to_host_f32(model.parameters().wte));
  const OptimizerSnapshot loaded = restored_optimizer->shard();
  EXPECT_EQ(loaded.first_moment, values.first_moment);
  EXPECT_EQ(loaded.second_moment, values.second_moment);
  EXPECT_EQ(loaded.master, values.master);
  fs::remove_all(directory);
}

// The state moves with the checkpoint between every --offload-optimizer mode: saved from pinned host
// memory or NVMe, loaded on the device (and back), bf16 parameters = the rounded master weights.
TEST(Checkpoint, OptimizerStateMovesBetweenOffloadModes) {
  auto device = create_device(DeviceOptions{});
  GptModel source(*device, tiny(), DType::bf16, {}, GradientStorage::streamed);
  initialize_gpt_parameters(source.parameters(), tiny(), 7);
  for (const std::string mode : {"cpu", "nvme"}) {
    offload::ZeroOffloadSettings settings;
    settings.device = offload::parse_offload_device(mode);
    settings.nvme_path = fresh_directory("nvme_state");
    settings.sub_group_elements = 400;  // several sub-groups, each at least one 4 KiB chunk of state
    settings.chunk_bytes = 4096;
    const auto offloaded = make_offload_optimizer(source, {}, settings);
    OptimizerSnapshot values = offloaded->shard();
    for (std::size_t i = 0; i < values.master.size(); ++i) {
      values.master[i] = 0.001f * static_cast<float>(i % 997);
      values.first_moment[i] = 0.5f + static_cast<float>(i);
      values.second_moment[i] = 2.0f * static_cast<float>(i);
    }
    values.steps = 5;
    offloaded->restore(values);
    const std::string directory = fresh_directory("offload_" + mode);
    save_checkpoint(directory, source, *offloaded, trainer_state(5, 10, 1, nlohmann::json::object()));

    GptModel restored(*device, tiny(), DType::bf16);
    const auto on_device = make_device_optimizer(restored, {});
    EXPECT_EQ(load_checkpoint(directory, restored, *on_device).step, 5) << mode;
    const OptimizerSnapshot loaded = on_device->shard();
    EXPECT_EQ(loaded.master, values.master) << mode;
    EXPECT_EQ(loaded.first_moment, values.first_moment) << mode;
    EXPECT_EQ(loaded.second_moment, values.second_moment) << mode;
    EXPECT_EQ(on_device->steps_taken(), 5) << mode;
    EXPECT_EQ(copy_to_host_f32(restored.parameters().wte), copy_to_host_f32(source.parameters().wte)) << mode;

    // ... and back into the offloaded tier.
    const auto again = make_offload_optimizer(source, {}, settings);
    load_checkpoint(directory, source, *again);
    EXPECT_EQ(again->shard().second_moment, values.second_moment) << mode;
    fs::remove_all(directory);
    fs::remove_all(settings.nvme_path);
  }
}

// A checkpoint is written into a new directory (the trainer's go through staging directories): saving
// over one is refused and leaves it whole.
TEST(Checkpoint, SavingOverACheckpointIsRefusedAndLeavesItWhole) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, tiny(), DType::f32);
  initialize_gpt_parameters(model.parameters(), tiny(), 7);
  const auto optimizer = make_device_optimizer(model, {});
  const std::string directory = fresh_directory("saved_over");
  save_checkpoint(directory, model, *optimizer, trainer_state(2, 4, 1, nlohmann::json::object()));
  initialize_gpt_parameters(model.parameters(), tiny(), 8);
  const auto changed = make_device_optimizer(model, {});
  try {
    save_checkpoint(directory, model, *changed, trainer_state(9, 9, 1, nlohmann::json::object()));
    FAIL() << "saving over a checkpoint was not refused";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("already holds a checkpoint"), std::string::npos) << error.what();
  }
  GptModel restored(*device, tiny(), DType::f32);
  const auto restored_optimizer = make_device_optimizer(restored, {});
  EXPECT_EQ(load_checkpoint(directory, restored, *restored_optimizer).step, 2);
  GptModel original(*device, tiny(), DType::f32);
  initialize_gpt_parameters(original.parameters(), tiny(), 7);
  EXPECT_EQ(copy_to_host_f32(restored.parameters().wte), copy_to_host_f32(original.parameters().wte));
  fs::remove_all(directory);
}

// The files several ranks write in place, each its shard (cut anywhere, mid-tensor included; a
// pipeline's last stage leaving out its copy of the tied table), are byte for byte those one process
// writes of the whole state, and load back to it.
TEST(Checkpoint, ShardsWrittenInPlaceMakeTheWholeFiles) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config{"tiny", 2, 8, 2, 11, 4};
  GptModel model(*device, config, DType::f32);
  initialize_gpt_parameters(model.parameters(), config, 7);
  const auto optimizer = make_device_optimizer(model, {});
  OptimizerSnapshot whole = optimizer->shard();
  for (std::size_t i = 0; i < whole.master.size(); ++i) {
    whole.first_moment[i] = 0.5f + static_cast<float>(i);
    whole.second_moment[i] = 2.0f * static_cast<float>(i);
  }
  whole.steps = 4;
  optimizer->restore(whole);
  const TrainerState state = trainer_state(4, 3, 1, nlohmann::json::object());
  const std::string one = fresh_directory("one_writer");
  save_checkpoint(one, model, *optimizer, state);

  auto shard_of = [&](std::int64_t begin, std::int64_t end) {
    OptimizerSnapshot shard = whole;
    shard.share = FlatRange{begin, end};
    for (std::vector<float>* values : {&shard.master, &shard.first_moment, &shard.second_moment}) {
      *values = std::vector<float>(values->begin() + begin, values->begin() + end);
    }
    return shard;
  };
  const auto total = static_cast<std::int64_t>(whole.master.size());
  const std::string many = fresh_directory("many_writers");
  create_checkpoint_files(many, config, whole.steps);
  const std::int64_t table = whole.offsets[1];  // wte's elements
  // Three shards cut mid-tensor; then the "last stage": the table with other values, left out.
  for (const auto& [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, table / 2 + 3}, {table / 2 + 3, total - 17}, {total - 17, total}}) {
    write_checkpoint_shard(many, shard_of(begin, end), {});
  }
  OptimizerSnapshot last_stage = shard_of(0, table);
  std::fill(last_stage.master.begin(), last_stage.master.end(), -1.0f);
  write_checkpoint_shard(many, last_stage, {"wte.weight"});
  finish_checkpoint(many, config, state, whole.steps);
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "DONE", "config.json", "trainer_state.json"}) {
    EXPECT_EQ(read_text_file((fs::path(one) / file).string()), read_text_file((fs::path(many) / file).string())) << file;
  }
  GptModel restored(*device, config, DType::f32);
  const auto restored_optimizer = make_device_optimizer(restored, {});
  EXPECT_EQ(load_checkpoint(many, restored, *restored_optimizer).step, 4);
  const OptimizerSnapshot loaded = restored_optimizer->shard();
  EXPECT_EQ(loaded.master, whole.master);
  EXPECT_EQ(loaded.first_moment, whole.first_moment);
  EXPECT_EQ(loaded.second_moment, whole.second_moment);
  // A shard naming a tensor the files lack is an error naming it.
  OptimizerSnapshot stranger = shard_of(0, 4);
  stranger.names[0] = "lm_head.weight";
  EXPECT_THROW(write_checkpoint_shard(many, stranger, {}), SafetensorsError);
  fs::remove_all(one);
  fs::remove_all(many);
}

TEST(CheckpointDirectory, AFailedSaveLeavesLatestAndNoStagingBehind) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, tiny(), DType::f32);
  initialize_gpt_parameters(model.parameters(), tiny(), 7);
  const auto optimizer = make_device_optimizer(model, {});
  const std::string root = fresh_directory("step_root");
  auto write_step = [&](std::int64_t step) {
    return save_checkpoint_step(root, step, 2, [&](const std::string& directory) {
      save_checkpoint(directory, model, *optimizer, trainer_state(step, 0, 1, nlohmann::json::object()));
    });
  };
  EXPECT_EQ(write_step(2), checkpoint_step_directory(root, 2));
  EXPECT_EQ(resolve_checkpoint(root), checkpoint_step_directory(root, 2));
  // A save that fails after writing part of its files, while replacing the same step's checkpoint.
  EXPECT_THROW(save_checkpoint_step(root, 2, 2, [&](const std::string& directory) {
                 save_checkpoint(directory, model, *optimizer, trainer_state(2, 0, 1, nlohmann::json::object()));
                 throw FileError(directory + "/DONE", 0, "injected");
               }),
               FileError);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000002"}));
  EXPECT_EQ(read_trainer_state(resolve_checkpoint(root)).step, 2);
  // Three more: two kept, latest the newest.
  write_step(3);
  write_step(4);
  write_step(5);
  names.clear();
  for (const auto& entry : fs::directory_iterator(root)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000004", "step-00000005"}));
  EXPECT_EQ(read_trainer_state(resolve_checkpoint(root)).step, 5);
  EXPECT_TRUE(remove_stale_checkpoint_files(root).empty());
  fs::remove_all(root);
}


// DONE is a checkpoint's promise: empty (what a crash leaves on ext4), random bytes, or without every
// file's checksum, it is partial, and the error lists the intact checkpoints beside it.
TEST(CheckpointDirectory, ADoneWithoutEveryChecksumIsPartial) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, tiny(), DType::f32);
  initialize_gpt_parameters(model.parameters(), tiny(), 7);
  const auto optimizer = make_device_optimizer(model, {});
  const std::string root = fresh_directory("done_root");
  for (const std::int64_t step : {1, 2}) {
    save_checkpoint_step(root, step, 0, [&](const std::string& directory) {
      save_checkpoint(directory, model, *optimizer, trainer_state(step, 0, 1, nlohmann::json::object()));
    });
  }
  const std::string damaged = checkpoint_step_directory(root, 2), intact = checkpoint_step_directory(root, 1);
  EXPECT_EQ(checkpoint_incomplete_reason(damaged), "");
  const std::string done = read_text_file(damaged + "/DONE");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "is empty"},
      {std::string("\x93\x01garbage\n", 10), "garbled"},
      {"step 2\n", "lacks the checksum of model.safetensors"},
      {done.substr(0, done.rfind("  trainer_state.json")) + "\n", "lacks the checksum of trainer_state.json"},
      {done + "extra\n", "text after the checksums"},
      {"step 2\n" + std::string(16, 'z') + "  model.safetensors\n", "lacks the checksum of model.safetensors"},
  };
  for (const auto& [text, reason] : cases) {
    write_file_atomically(damaged + "/DONE", text);
    EXPECT_NE(checkpoint_incomplete_reason(damaged).find(reason), std::string::npos) << checkpoint_incomplete_reason(damaged);
    try {
      read_trainer_state(damaged);
      ADD_FAILURE() << "a DONE of '" << text << "' was accepted";
    } catch (const CheckpointError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("is partial: "), std::string::npos) << message;
      EXPECT_NE(message.find("resume from one of the intact checkpoints beside it: " + intact), std::string::npos) << message;
    }
  }
  write_file_atomically(damaged + "/DONE", done);
  EXPECT_EQ(read_trainer_state(damaged).step, 2);
  fs::remove_all(root);
}

// A save root: one run at a time, a new run never overwrites another's checkpoints unless told, and
// cleanup and saves never touch a step-* directory or `latest` ferry did not write.
TEST(CheckpointDirectory, ASaveNeverDestroysWhatItDidNotWrite) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, tiny(), DType::f32);
  initialize_gpt_parameters(model.parameters(), tiny(), 7);
  const auto optimizer = make_device_optimizer(model, {});
  const std::string root = fresh_directory("own_root");
  auto write_step = [&](std::int64_t step, std::int64_t keep) {
    return save_checkpoint_step(root, step, keep, [&](const std::string& directory) {
      save_checkpoint(directory, model, *optimizer, trainer_state(step, 0, 1, nlohmann::json::object()));
    });
  };
  {
    const SaveRootLock held(root);
    try {
      const SaveRootLock second(root);
      ADD_FAILURE() << "a second lock on one save root";
    } catch (const CheckpointError& error) {
      EXPECT_NE(std::string(error.what()).find("is in use by another ferry run (PID " + std::to_string(::getpid()) + " on host"), std::string::npos)
          << error.what();
    }
  }
  { const SaveRootLock again(root); }  // released with its holder
  require_save_root_usable(root, "", false);  // no checkpoints yet
  write_step(1, 0);
  try {
    require_save_root_usable(root, "", false);
    ADD_FAILURE() << "a new run into a root with checkpoints";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("holds 1 checkpoint of another run (the newest step-00000001)"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("--overwrite-checkpoints"), std::string::npos) << error.what();
  }
  require_save_root_usable(root, checkpoint_step_directory(root, 1), false);  // resuming from it
  require_save_root_usable(root, "", true);
  EXPECT_THROW(require_save_root_usable(root, fresh_directory("elsewhere") + "/step-00000001", false), CheckpointError);

  // A user's own directories beside ferry's: a step without DONE or marker, a stale-looking staging
  // directory without the marker. Cleanup leaves them; pruning counts only complete checkpoints.
  fs::create_directories(root + "/step-00000007");
  std::ofstream(root + "/step-00000007/notes.txt") << "mine";
  fs::create_directories(root + "/step-00000009.tmp.999999999");
  std::ofstream(root + "/step-00000009.tmp.999999999/notes.txt") << "mine too";
  fs::create_directories(root + "/step-00000006.tmp.999999997");  // empty: a staging directory killed before its marker
  fs::create_directories(root + "/step-00000008.tmp.999999998");  // ferry's: a staged copy with the marker
  fs::copy(checkpoint_step_directory(root, 1), root + "/step-00000008.tmp.999999998", fs::copy_options::recursive);
  const std::vector<std::string> removed = remove_stale_checkpoint_files(root + "/");  // `--save dir/` is the same root
  std::vector<std::string> sorted = removed;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{root + "/step-00000006.tmp.999999997", root + "/step-00000008.tmp.999999998"}));
  EXPECT_TRUE(fs::exists(root + "/step-00000007/notes.txt"));
  EXPECT_TRUE(fs::exists(root + "/step-00000009.tmp.999999999"));
  write_step(2, 1);
  EXPECT_TRUE(fs::exists(root + "/step-00000007/notes.txt"));
  EXPECT_FALSE(fs::exists(checkpoint_step_directory(root, 1)));
  // A save of a step whose name a user's directory holds is refused, the directory whole.
  EXPECT_THROW(write_step(7, 0), CheckpointError);
  EXPECT_TRUE(fs::exists(root + "/step-00000007/notes.txt"));
  EXPECT_EQ(resolve_checkpoint(root), checkpoint_step_directory(root, 2));
  // A `latest` that is a user's file: refused before the run and at a save, never replaced.
  fs::remove(root + "/latest");
  std::ofstream(root + "/latest") << "my notes";
  EXPECT_THROW(require_save_root_usable(root, "", true), CheckpointError);
  EXPECT_THROW(write_step(3, 0), CheckpointError);
  EXPECT_EQ(read_text_file(root + "/latest"), "my notes");
  try {
    resolve_checkpoint(root);
    ADD_FAILURE() << "a file named latest resolved";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("`latest` is a file, not the link ferry keeps to the newest checkpoint; resume from one of: " +
                                             checkpoint_step_directory(root, 2)), std::string::npos) << error.what();
  }
  fs::remove_all(root);
}

TEST(Checkpoint, AnImpossibleStepInTheTrainerStateIsNamed) {
  // A checkpoint's trainer_state.json with its step edited (DONE's checksum catches the edit on load; a
  // state written wrong is still refused by its values).
  const std::string text = trainer_state_text(trainer_state(-5, 0, 1, nlohmann::json::object()), 0);
  try {
    parse_trainer_state(text, "/checkpoint");
    ADD_FAILURE() << "step -5 accepted";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("says step -5, expected 0 to"), std::string::npos) << error.what();
  }
}

// A rank's initial shard (12 bytes a parameter) reaches the optimizer as it is: ZeRO-Infinity's host cannot
// hold it twice. A part of a snapshot is cut out; one that does not cover the share is refused before import.
TEST(OptimizerSnapshotValues, TheRanksOwnShareIsImportedWithoutACopy) {
  OptimizerSnapshot snapshot;
  snapshot.share = FlatShards(std::vector<FlatRange>{{0, 4}, {8, 10}});
  snapshot.master = {0, 1, 2, 3, 8, 9};
  snapshot.first_moment = {10, 11, 12, 13, 18, 19};
  snapshot.second_moment = {20, 21, 22, 23, 28, 29};
  int imports = 0;
  import_values_of(snapshot, snapshot.share, [&](const std::vector<float>& master, const std::vector<float>& first, const std::vector<float>& second) {
    ++imports;
    EXPECT_EQ(&master, &snapshot.master);
    EXPECT_EQ(&first, &snapshot.first_moment);
    EXPECT_EQ(&second, &snapshot.second_moment);
  });
  import_values_of(snapshot, FlatShards(std::vector<FlatRange>{{1, 3}, {9, 10}}),
                   [&](const std::vector<float>& master, const std::vector<float>& first, const std::vector<float>& second) {
                     ++imports;
                     EXPECT_EQ(master, (std::vector<float>{1, 2, 9}));
                     EXPECT_EQ(first, (std::vector<float>{11, 12, 19}));
                     EXPECT_EQ(second, (std::vector<float>{21, 22, 29}));
                   });
  EXPECT_EQ(imports, 2);
  EXPECT_THROW(import_values_of(snapshot, FlatShards(FlatRange{3, 9}), [&](const auto&, const auto&, const auto&) { ADD_FAILURE(); }),
               std::invalid_argument);
}

// Any window of a rank's initial shard, across its ranges and tensors, is the same slice of the whole
// shard (ZeRO-Infinity writes its optimizer's sub-groups one window at a time), bf16 rounding included.
TEST(OptimizerSnapshotValues, AWindowOfTheInitialShardIsItsSlice) {
  auto device = create_device(DeviceOptions{});
  const GptModel model(*device, testing::tiny_gpt_config(), DType::bf16);
  const ParameterValuesSource source = [](const ParameterSpec& spec, std::int64_t offset, std::int64_t count) {
    std::vector<float> values(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) values[static_cast<std::size_t>(i)] = 0.001f * static_cast<float>(spec.numel() + offset + i) + 0.3f;
    return values;
  };
  const FlatShards share(std::vector<FlatRange>{{5, 300}, {900, 1400}, {2000, 2001}});
  std::vector<float> whole(static_cast<std::size_t>(share.size()));
  write_initial_values(model, share, 0, share.size(), whole.data(), source);
  for (const auto& [begin, count] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, share.size()}, {0, 1}, {290, 20}, {294, 502}, {795, 1}, {700, 96}}) {
    std::vector<float> window(static_cast<std::size_t>(count), -1.0f);
    write_initial_values(model, share, begin, count, window.data(), source);
    EXPECT_TRUE(std::equal(window.begin(), window.end(), whole.begin() + begin)) << "window " << begin << " + " << count;
  }
}

}  // namespace
}  // namespace ferry
