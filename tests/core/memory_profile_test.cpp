// Memory profiles: the timeline rebuilt from a recorded window has exact byte figures (per category,
// at the peak, the live allocations there, reserved bytes), the op running at the peak, a lossless
// profile.json round trip, clear errors for corrupt or incomplete profiles, and the end of a profile at
// an out-of-memory failure.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "allocator/allocator_errors.h"
#include "engine/core/memory_profile_file.h"
#include "engine/core/memory_timeline.h"
#include "engine/core/tensor.h"

namespace ferry {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

std::unique_ptr<Device> small_cpu(std::size_t limit = 64 * kMiB) {
  DeviceOptions options;
  options.kind = DeviceKind::cpu;
  options.memory_limit = limit;
  return create_device(options);
}

// `count` bytes (an even count) as a u16 tensor.
Tensor bytes(Device& device, std::int64_t count, MemoryCategory category, const char* tag) {
  return Tensor::empty(device, {count / 2}, DType::u16, category, tag);
}

// A parameter before the window; inside it an activation, a forward op holding a second activation
// and a workspace buffer (the peak), then frees.
MemoryProfile record_window(Device& device, Tensor& parameter) {
  parameter = bytes(device, 3 * kMiB, MemoryCategory::parameters, "weight");
  MemoryProfiler profiler(device);
  profiler.start();
  Tensor first = bytes(device, 2 * kMiB, MemoryCategory::activations, "first");
  {
    const OpScope step(device, "step", "step 1");
    const OpScope forward(device, "forward", "h.0");
    Tensor second = bytes(device, 4 * kMiB, MemoryCategory::activations, "second");
    Tensor scratch = bytes(device, 1000, MemoryCategory::workspace, "scratch");
  }
  first = Tensor();
  return profiler.stop();
}

TEST(MemoryTimeline, RebuildsExactBytesPeakAndWhatWasLive) {
  auto device = small_cpu();
  Tensor parameter;
  const MemoryProfile profile = record_window(*device, parameter);
  ASSERT_EQ(profile.initial_allocations.size(), 1u);
  EXPECT_EQ(profile.initial_allocations[0].tag, "weight");
  const MemoryTimeline timeline = build_memory_timeline(profile);

  const std::int64_t scratch_rounded = 1024;  // 1000 bytes round to 512-byte multiples
  EXPECT_EQ(timeline.peak_allocated, 9 * kMiB + scratch_rounded);
  EXPECT_EQ(timeline.peak_allocated, device->allocator().statistics().allocated_bytes.all().peak);
  EXPECT_EQ(timeline.peak_reserved, device->allocator().statistics().reserved_bytes.all().peak);
  const TimelinePoint& peak = timeline.peak();
  EXPECT_EQ(peak.allocated[category_index(MemoryCategory::parameters)], 3 * kMiB);
  EXPECT_EQ(peak.allocated[category_index(MemoryCategory::activations)], 6 * kMiB);
  EXPECT_EQ(peak.allocated[category_index(MemoryCategory::workspace)], scratch_rounded);
  EXPECT_EQ(timeline.category_peak[category_index(MemoryCategory::activations)], 6 * kMiB);
  // The window ends with only the parameter live.
  EXPECT_EQ(timeline.last().total(), 3 * kMiB);
  ASSERT_EQ(timeline.live_at_peak.size(), 4u);
  EXPECT_EQ(timeline.live_at_peak[0].tag, "second");
  EXPECT_EQ(timeline.live_at_peak[1].tag, "weight");
  EXPECT_EQ(timeline.live_at_peak[2].tag, "first");
  EXPECT_EQ(timeline.live_at_peak[3].tag, "scratch");
  ASSERT_EQ(timeline.ops_at_peak.size(), 2u);
  EXPECT_EQ(timeline.ops_at_peak[0].name, "step 1");
  EXPECT_EQ(timeline.ops_at_peak[1].kind, "forward");
  EXPECT_EQ(timeline.ops_at_peak[1].depth, 1);
}

TEST(MemoryTimeline, DownsamplingKeepsThePeak) {
  auto device = small_cpu();
  MemoryProfiler profiler(*device);
  profiler.start();
  std::vector<Tensor> live;
  for (int i = 0; i < 300; ++i) {
    live.push_back(bytes(*device, 4096 * (1 + i % 7), MemoryCategory::activations, "a"));
    if (i % 3 == 2) live.erase(live.begin());
  }
  live.clear();
  const MemoryTimeline timeline = build_memory_timeline(profiler.stop());
  const std::vector<TimelinePoint> few = downsample_timeline(timeline, 50);
  EXPECT_LE(few.size(), 51u);
  std::int64_t highest = 0;
  for (const TimelinePoint& point : few) highest = std::max(highest, point.total());
  EXPECT_EQ(highest, timeline.peak_allocated);
  EXPECT_EQ(few.back().time_ns, timeline.last().time_ns);
}

TEST(MemoryProfile, RoundTripsThroughProfileJson) {
  auto device = small_cpu();
  Tensor parameter;
  MemoryProfile profile = record_window(*device, parameter);
  profile.metadata = {{"model", "test"}};
  const std::string directory = (std::filesystem::temp_directory_path() / "ferry_profile_roundtrip").string();
  std::filesystem::remove_all(directory);
  write_memory_profile(directory, profile);
  const MemoryProfile read = read_memory_profile(directory);
  EXPECT_EQ(read.metadata["model"], "test");
  ASSERT_EQ(read.events.size(), profile.events.size());
  for (std::size_t i = 0; i < read.events.size(); ++i) {
    EXPECT_EQ(read.events[i].time_ns, profile.events[i].time_ns - profile.start_ns);
    EXPECT_EQ(read.events[i].action, profile.events[i].action);
    EXPECT_EQ(read.events[i].size, profile.events[i].size);
    EXPECT_EQ(read.events[i].category, profile.events[i].category);
  }
  EXPECT_EQ(read.ops.size(), profile.ops.size());
  const MemoryTimeline original = build_memory_timeline(profile), again = build_memory_timeline(read);
  EXPECT_EQ(again.peak_allocated, original.peak_allocated);
  EXPECT_EQ(again.peak().time_ns, original.peak().time_ns);
  EXPECT_EQ(again.live_at_peak.size(), original.live_at_peak.size());
  EXPECT_EQ(again.ops_at_peak.size(), original.ops_at_peak.size());
  std::filesystem::remove_all(directory);
}

TEST(MemoryProfile, CorruptOrIncompleteProfilesAreClearErrors) {
  const std::string directory = (std::filesystem::temp_directory_path() / "ferry_profile_corrupt").string();
  std::filesystem::remove_all(directory);
  EXPECT_THROW(read_memory_profile(directory), ProfileError);
  std::filesystem::create_directories(directory);
  std::ofstream(directory + "/profile.json") << "{\"format\": \"ferry-memory-profile\", \"version\": 1, \"events\": [";
  try {
    read_memory_profile(directory);
    FAIL() << "a truncated profile was read";
  } catch (const ProfileError& error) {
    EXPECT_NE(std::string(error.what()).find("profile.json is not valid JSON"), std::string::npos) << error.what();
  }
  std::filesystem::remove_all(directory);

  MemoryProfile unknown_free;
  unknown_free.events.push_back(TraceEvent{TraceAction::free_requested, MemoryCategory::activations, 0, 5, 4096, 512, 0});
  EXPECT_THROW(build_memory_timeline(unknown_free), ProfileError);
  MemoryProfile dropped;
  dropped.dropped_events = 3;
  EXPECT_THROW(build_memory_timeline(dropped), ProfileError);
}

TEST(MemoryProfile, EndsAtTheOutOfMemoryFailure) {
  auto device = small_cpu(24 * kMiB);
  MemoryProfiler profiler(*device);
  profiler.start();
  {
    Tensor held = bytes(*device, 4 * kMiB, MemoryCategory::activations, "held");
    EXPECT_THROW(bytes(*device, 30 * kMiB, MemoryCategory::activations, "too big"), OutOfMemoryError);
  }  // `held` is freed after the failure, as an exception unwinds
  MemoryProfile profile = profiler.stop();
  ASSERT_TRUE(end_at_last_out_of_memory(profile));
  const MemoryTimeline timeline = build_memory_timeline(profile);
  EXPECT_EQ(timeline.out_of_memory_events, 1u);
  EXPECT_EQ(timeline.last().total(), 4 * kMiB);  // the moment of the failure, not after the unwinding
  EXPECT_FALSE(end_at_last_out_of_memory(profile = MemoryProfile{}));
}

}  // namespace
}  // namespace ferry
