// PyTorch snapshots as profiles: the checked-in snapshot (scripts/make_torch_snapshot.py) reports the
// peaks the script computed, byte for byte, also when the ring buffer dropped the oldest events; a
// ferry profile written as a snapshot reads back to the same report; categories follow the stated
// rule; replaying a snapshot equals replaying the RMM CSV of the same trace; broken traces are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "allocator/trace_replay.h"
#include "engine/core/memory_timeline.h"
#include "engine/report/memory_report.h"
#include "engine/snapshot/frame_categories.h"
#include "engine/snapshot/pickle_reader.h"
#include "engine/snapshot/pickle_writer.h"
#include "engine/snapshot/segment_ledger.h"
#include "engine/snapshot/snapshot_profile.h"
#include "engine/snapshot/snapshot_replay.h"
#include "tests/snapshot/pickle_test_support.h"

namespace ferry {
namespace {

nlohmann::json expected(const std::string& name) {
  std::ifstream input(testing::snapshot_data_directory() + "/" + name);
  return nlohmann::json::parse(input);
}

std::string data_file(const std::string& name) { return testing::snapshot_data_directory() + "/" + name; }

// A checked-in snapshot read as a profile, its timeline, and what the script says it must show.
struct KnownRun {
  nlohmann::json truth;
  MemoryProfile profile;
  MemoryTimeline timeline;
};

// Reads RUN.pickle and checks the peaks against RUN.expected.json.
KnownRun read_known_run(const std::string& run) {
  KnownRun known{expected(run + ".expected.json"), read_profile_or_snapshot(data_file(run + ".pickle")), {}};
  known.timeline = build_memory_timeline(known.profile);
  EXPECT_EQ(known.timeline.peak_allocated, known.truth["peak_allocated"].get<std::int64_t>()) << run;
  EXPECT_EQ(known.timeline.peak_reserved, known.truth["peak_reserved"].get<std::int64_t>()) << run;
  return known;
}

TEST(SnapshotProfile, ReportsTheKnownPeaksExactly) {
  const auto [truth, profile, timeline] = read_known_run("training");
  EXPECT_TRUE(profile.initial_allocations.empty());
  EXPECT_EQ(profile.initial_reserved, 0);
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::int64_t want = truth["at_peak"].value(std::string(category_name(category)), std::int64_t{0});
    EXPECT_EQ(timeline.peak().allocated[category_index(category)], want) << category_name(category);
  }
  // Tags name the innermost frame of user code.
  ASSERT_FALSE(timeline.live_at_peak.empty());
  EXPECT_EQ(timeline.live_at_peak.front().tag, "model.py:41 forward");
}

TEST(SnapshotProfile, RebuildsWhatWasLiveBeforeTheRingBufferBegan) {
  const auto [truth, profile, timeline] = read_known_run("ring");
  EXPECT_FALSE(profile.initial_allocations.empty());
  EXPECT_GT(profile.initial_reserved, 0);
  // The parameters were allocated in the dropped events; their blocks' frames still say what they are.
  EXPECT_EQ(timeline.peak().allocated[category_index(MemoryCategory::parameters)], truth["parameters_at_peak"].get<std::int64_t>());
}

TEST(SnapshotProfile, ReadsExpandableSegmentsAndOoms) {
  const auto [truth, profile, timeline] = read_known_run("expandable");
  EXPECT_EQ(timeline.out_of_memory_events, truth["ooms"].get<std::size_t>());
  EXPECT_EQ(profile.initial_reserved, 0);
  EXPECT_EQ(timeline.last().reserved, 20 << 20);  // the second 20 MiB were unmapped again
}

TEST(SnapshotProfile, CategoriesFollowTheStatedRule) {
  const auto frame = [](std::string file, std::string name) { return TorchFrame{std::move(file), 1, std::move(name)}; };
  const std::string torch = "/usr/lib/python3/dist-packages/torch/";
  EXPECT_EQ(infer_category({frame(torch + "optim/adam.py", "step"), frame("/w/train.py", "main")}).category, MemoryCategory::optimizer_states);
  EXPECT_EQ(infer_category({frame(torch + "autograd/__init__.py", "backward")}).category, MemoryCategory::gradients);
  EXPECT_EQ(infer_category({frame(torch + "nn/modules/module.py", "_apply"), frame("/w/train.py", "main")}).category, MemoryCategory::parameters);
  EXPECT_EQ(infer_category({frame("/w/model.py", "forward")}).category, MemoryCategory::activations);
  // Backward wins over the forward it reaches through, the optimizer over both.
  EXPECT_EQ(infer_category({frame("/w/model.py", "forward"), frame(torch + "_tensor.py", "backward")}).category, MemoryCategory::gradients);
  const InferredCategory unknown = infer_category({frame("/w/data.py", "get_batch")});
  EXPECT_EQ(unknown.category, MemoryCategory::uncategorized);
  EXPECT_EQ(unknown.tag, "data.py:1 get_batch");
  const InferredCategory ferry = infer_category({ferry_frame(MemoryCategory::workspace, "h.0.attn"), frame("/w/model.py", "forward")});
  EXPECT_EQ(ferry.category, MemoryCategory::workspace);
  EXPECT_EQ(ferry.tag, "h.0.attn");
}

// A profile with what the writer must carry: allocations live at the start (one freed, one kept to the
// end), reserved bytes from before, segments allocated and freed, tags, ops, an OOM and the metadata.
MemoryProfile example_profile() {
  MemoryProfile profile;
  profile.metadata = {{"model", "gpt2-tiny"}, {"device", "cpu"}, {"precision", "bf16"}, {"micro_batch", 2}, {"seq", 32}};
  profile.memory_limit = 64 << 20;
  profile.start_ns = 1000;
  profile.end_ns = 9'001'000;
  profile.initial_reserved = 20 << 20;
  profile.initial_allocations = {{0x10000, 4 << 20, MemoryCategory::parameters, "wte", 0},
                                 {0x10000 + (4 << 20), 1 << 20, MemoryCategory::optimizer_states, "wte.m", 0}};
  profile.tags = {{1, "h.0.mlp"}, {2, "h.0.attn"}};
  const auto event = [](TraceAction action, MemoryCategory category, TagId tag, std::uint64_t time, std::uintptr_t address, std::size_t size) {
    return TraceEvent{action, category, tag, time, address, size, 0};
  };
  const std::uintptr_t segment = 0x4000000;
  profile.events = {
      event(TraceAction::segment_alloc, MemoryCategory::uncategorized, 0, 2000, segment, 20 << 20),
      event(TraceAction::alloc, MemoryCategory::activations, 1, 3001, segment, 6 << 20),
      event(TraceAction::alloc, MemoryCategory::workspace, 2, 4500, segment + (6 << 20), 512),
      event(TraceAction::free_requested, MemoryCategory::optimizer_states, 0, 5000, 0x10000 + (4 << 20), 1 << 20),
      event(TraceAction::free_completed, MemoryCategory::uncategorized, 0, 5000, 0x10000 + (4 << 20), 1 << 20),
      event(TraceAction::alloc, MemoryCategory::activations, 1, 6000, segment + (8 << 20), 10 << 20),
      event(TraceAction::oom, MemoryCategory::activations, 2, 7000, 0, 40 << 20),
      event(TraceAction::free_requested, MemoryCategory::activations, 1, 8000, segment, 6 << 20),
      event(TraceAction::free_completed, MemoryCategory::uncategorized, 0, 8000, segment, 6 << 20),
      event(TraceAction::segment_alloc, MemoryCategory::uncategorized, 0, 8500, 0x9000000, 2 << 20),
      event(TraceAction::segment_free, MemoryCategory::uncategorized, 0, 8700, 0x9000000, 2 << 20),
  };
  profile.ops = {{"step", "step 1", 0, 1500, 8800, 0}, {"forward", "h.0", 0, 2500, 6500, 1}, {"backward", "h.0", 0, 7500, 0, 1}};
  profile.failure = "out of device memory: tried to allocate 40 MiB";
  return profile;
}

TEST(SnapshotProfile, AProfileWrittenAsASnapshotReadsBackToTheSameReport) {
  const MemoryProfile original = example_profile();
  const std::string pickle = write_pickle(encode_torch_snapshot(profile_to_snapshot(original)));
  const MemoryProfile back = snapshot_to_profile(decode_torch_snapshot(read_pickle(pickle, "written"), "written"), "written");
  const MemoryTimeline original_timeline = build_memory_timeline(original);
  const MemoryTimeline back_timeline = build_memory_timeline(back);
  EXPECT_EQ(memory_report_table(back, back_timeline, 10), memory_report_table(original, original_timeline, 10));
  EXPECT_EQ(chrome_trace(back, back_timeline).dump(), chrome_trace(original, original_timeline).dump());
  EXPECT_EQ(back.initial_reserved, original.initial_reserved);
  EXPECT_EQ(back.initial_allocations.size(), 2u);
  EXPECT_EQ(back_timeline.peak_allocated, (4 << 20) + (6 << 20) + 512 + (10 << 20));
}

TEST(SnapshotProfile, RefusesTracesThatContradictThemselves) {
  const TorchSnapshot good = read_torch_snapshot_file(data_file("training.pickle"));
  std::vector<TorchTraceEntry>& trace = const_cast<TorchSnapshot&>(good).device_traces[0];
  const auto first_free = std::find_if(trace.begin(), trace.end(), [](const TorchTraceEntry& e) { return e.action == TorchAction::free_requested; });
  ASSERT_NE(first_free, trace.end());
  TorchSnapshot double_free = good;
  double_free.device_traces[0].insert(double_free.device_traces[0].begin() + (first_free - trace.begin()) + 2, *first_free);
  try {
    snapshot_to_profile(double_free, "double.pickle");
    ADD_FAILURE() << "a double free was accepted";
  } catch (const SnapshotError& error) {
    EXPECT_NE(std::string(error.what()).find("an unknown address (not live: freed at event"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("double.pickle: device_traces[0]["), std::string::npos) << error.what();
  }
  TorchSnapshot alloc_twice = good;
  const auto first_alloc = std::find_if(trace.begin(), trace.end(), [](const TorchTraceEntry& e) { return e.action == TorchAction::alloc; });
  alloc_twice.device_traces[0].insert(alloc_twice.device_traces[0].begin() + (first_alloc - trace.begin()) + 1, *first_alloc);
  EXPECT_THROW(snapshot_to_profile(alloc_twice, "twice.pickle"), SnapshotError);
}

// Segment events are checked by the bytes they cover, not by the address they name: with expandable
// segments PyTorch maps and unmaps pieces of one reservation.
TEST(SnapshotProfile, RefusesSegmentEventsOverMemoryInTheWrongState) {
  const TorchSnapshot good = read_torch_snapshot_file(data_file("expandable.pickle"));
  const std::vector<TorchTraceEntry>& trace = good.device_traces[0];
  const auto is = [](TorchAction action) { return [action](const TorchTraceEntry& e) { return e.action == action; }; };
  const auto map = std::find_if(trace.begin(), trace.end(), is(TorchAction::segment_map));
  const auto unmap = std::find_if(trace.begin(), trace.end(), is(TorchAction::segment_unmap));
  ASSERT_NE(map, trace.end());
  ASSERT_NE(unmap, trace.end());
  ASSERT_GE(unmap->size, 4u << 20);
  const auto refusal = [](const TorchSnapshot& snapshot) -> std::string {
    try {
      snapshot_to_profile(snapshot, "bad.pickle");
    } catch (const SnapshotError& error) {
      return error.what();
    }
    return "accepted";
  };
  // The second half of a mapped piece mapped again.
  TorchSnapshot remapped = good;
  TorchTraceEntry overlap = *map;
  overlap.address += map->size / 2;
  remapped.device_traces[0].insert(remapped.device_traces[0].begin() + (map - trace.begin()) + 1, overlap);
  EXPECT_NE(refusal(remapped).find("maps 0x"), std::string::npos) << refusal(remapped);
  EXPECT_NE(refusal(remapped).find(", which the trace mapped at event " + std::to_string(map - trace.begin()) + " and has not unmapped"),
            std::string::npos)
      << refusal(remapped);
  // A piece inside memory the trace already unmapped, unmapped again at another address.
  TorchSnapshot inner = good;
  TorchTraceEntry again = *unmap;
  again.address += 2 << 20;
  again.size = 2 << 20;
  inner.device_traces[0].insert(inner.device_traces[0].begin() + (unmap - trace.begin()) + 1, again);
  EXPECT_NE(refusal(inner).find(", which the trace unmapped at event " + std::to_string(unmap - trace.begin()) + " and never mapped again"),
            std::string::npos)
      << refusal(inner);
  // Memory the trace never touched was mapped before the ring began: unmapping it is taken as such.
  TorchSnapshot before = good;
  TorchTraceEntry old_segment = *unmap;
  old_segment.address = 0x7f0000000000;
  before.device_traces[0].insert(before.device_traces[0].begin() + (unmap - trace.begin()) + 1, old_segment);
  EXPECT_EQ(snapshot_to_profile(before, "before.pickle").initial_reserved, static_cast<std::int64_t>(old_segment.size));
}

TEST(SegmentLedger, KnowsEachByteByTheLastEventThatCoveredIt) {
  SegmentLedger ledger;
  EXPECT_FALSE(ledger.map(0x1000, 0x4000, 1));  // [0x1000, 0x5000) mapped
  EXPECT_FALSE(ledger.unmap(0x2000, 0x1000, 2));  // [0x2000, 0x3000) unmapped
  const auto mapped = ledger.map(0x2000, 0x2000, 3);  // reaches into [0x3000, 0x4000), still mapped
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->begin, 0x3000u);
  EXPECT_EQ(mapped->event, 1u);
  EXPECT_FALSE(ledger.map(0x2000, 0x1000, 4));  // the unmapped piece alone maps again
  const auto unmapped = ledger.unmap(0x0, 0x2000, 5);  // [0x0, 0x1000) unknown, [0x1000, 0x2000) mapped
  EXPECT_FALSE(unmapped);
  const auto twice = ledger.unmap(0x800, 0x100, 6);
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->begin, 0x800u);
  EXPECT_EQ(twice->event, 5u);
  EXPECT_FALSE(ledger.find(0x2000, 0x3000, SegmentLedger::State::unmapped));
  EXPECT_FALSE(ledger.find(0x5000, 0x1000, SegmentLedger::State::mapped));  // never touched
  EXPECT_FALSE(ledger.map(0x5000, 0, 7));
}

TEST(SnapshotProfile, DecodingNamesTheFieldThatIsWrong) {
  PickleDocument document;
  const PickleRef root = document.add_dict();
  const PickleRef traces = document.add_list();
  const PickleRef trace = document.add_list();
  const PickleRef entry = document.add_dict();
  document.set_item(entry, document.add_string("action"), document.add_string("alloc"));
  document.set_item(entry, document.add_string("addr"), document.add_string("0x10"));
  document.append(trace, entry);
  document.append(traces, trace);
  document.set_item(root, document.add_string("device_traces"), traces);
  document.set_root(root);
  try {
    decode_torch_snapshot(document, "typed.pickle");
    ADD_FAILURE() << "a string address was accepted";
  } catch (const SnapshotError& error) {
    EXPECT_STREQ(error.what(), "typed.pickle: device_traces[0][0].addr: expected an int, found a str");
  }
}

class SnapshotReplay : public ::testing::TestWithParam<const char*> {};

TEST_P(SnapshotReplay, EqualsTheRmmCsvOfTheSameTrace) {
  const std::string run = GetParam();
  const std::vector<RmmTraceRecord> from_snapshot = profile_allocation_records(read_profile_or_snapshot(data_file(run + ".pickle")));
  const std::vector<RmmTraceRecord> from_csv = read_rmm_trace_file(data_file(run + ".csv"));
  ASSERT_EQ(from_snapshot.size(), from_csv.size());
  for (const char* conf : {"", "expandable_segments:True", "max_split_size_mb:24"}) {
    const AllocatorConfig config = AllocatorConfig::parse(conf);
    for (std::size_t capacity : {kUnlimitedReplayCapacity, std::size_t{72} << 20}) {
      const ReplayResult a = replay_trace(from_snapshot, capacity, config);
      const ReplayResult b = replay_trace(from_csv, capacity, config);
      EXPECT_EQ(a.peak_requested, b.peak_requested) << conf;
      EXPECT_EQ(a.peak_allocated, b.peak_allocated) << conf;
      EXPECT_EQ(a.peak_reserved, b.peak_reserved) << conf;
      EXPECT_EQ(a.fragmentation_at_peak, b.fragmentation_at_peak) << conf;
      EXPECT_EQ(a.num_ooms, b.num_ooms) << conf;
      EXPECT_EQ(a.num_alloc_retries, b.num_alloc_retries) << conf;
      EXPECT_EQ(a.num_device_alloc, b.num_device_alloc) << conf;
    }
    EXPECT_EQ(find_min_capacity(from_snapshot, config), find_min_capacity(from_csv, config)) << conf;
  }
  EXPECT_EQ(replay_trace(from_snapshot, kUnlimitedReplayCapacity, AllocatorConfig::parse("")).peak_requested,
            expected(run + ".expected.json")["peak_allocated"].get<std::size_t>());
}

INSTANTIATE_TEST_SUITE_P(Snapshots, SnapshotReplay, ::testing::Values("training", "expandable"));

// PyTorch's own snapshot of gpt2 training on an H200 (gpt2_h200.expected.json says how it was made): the
// report's peaks are torch.cuda.memory_stats' (the trace records requested sizes: its requested and reserved
// peaks), and the trace replayed through ferry's allocator gives PyTorch's allocated and reserved peaks,
// with fixed segments at the addresses cudaMalloc returned there (equal free blocks are chosen by address;
// at increasing addresses of its own the replay allocated 0.05% more) and with expandable segments (the
// same program run again with expandable_segments:True).
TEST(SnapshotProfile, AGpuSnapshotGivesPyTorchsOwnPeaks) {
  const nlohmann::json truth = expected("gpt2_h200.expected.json");
  const MemoryProfile profile = read_profile_or_snapshot(data_file("gpt2_h200.pickle"));
  EXPECT_EQ(profile.events.size(), truth["events"].get<std::size_t>());
  const MemoryTimeline timeline = build_memory_timeline(profile);
  const nlohmann::json& stats = truth["memory_stats"];
  EXPECT_EQ(timeline.peak_allocated, stats["requested_bytes.all.peak"].get<std::int64_t>());
  EXPECT_EQ(timeline.peak_reserved, stats["reserved_bytes.all.peak"].get<std::int64_t>());

  const std::vector<RmmTraceRecord> records = profile_allocation_records(profile);
  const std::vector<RecordedSegment> segments = profile_segment_records(profile);
  const AllocatorConfig fixed_segments = AllocatorConfig::parse("expandable_segments:False");
  const ReplayResult fixed = replay_trace(records, kUnlimitedReplayCapacity, fixed_segments, segments);
  EXPECT_EQ(fixed.segments_at_recorded_addresses, segments.size());
  EXPECT_EQ(segments.size(), 143u);
  EXPECT_EQ(fixed.peak_requested, stats["requested_bytes.all.peak"].get<std::size_t>());
  EXPECT_EQ(fixed.peak_allocated, stats["allocated_bytes.all.peak"].get<std::size_t>());
  EXPECT_EQ(fixed.peak_reserved, stats["reserved_bytes.all.peak"].get<std::size_t>());
  const ReplayResult own_addresses = replay_trace(records, kUnlimitedReplayCapacity, fixed_segments);
  EXPECT_NE(own_addresses.peak_allocated, fixed.peak_allocated);  // the addresses decide which block a request takes
  EXPECT_EQ(own_addresses.peak_reserved, fixed.peak_reserved);
  const ReplayResult expandable = replay_trace(records, kUnlimitedReplayCapacity, AllocatorConfig::parse("expandable_segments:True"));
  EXPECT_EQ(expandable.peak_allocated, truth["expandable_segments_run"]["allocated_bytes.all.peak"].get<std::size_t>());
  EXPECT_EQ(expandable.peak_reserved, truth["expandable_segments_run"]["reserved_bytes.all.peak"].get<std::size_t>());
}

}  // namespace
}  // namespace ferry
