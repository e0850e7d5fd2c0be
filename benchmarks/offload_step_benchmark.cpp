// The pipelined ZeRO-Offload step against its parts measured alone in the same run: reading every
// sub-group of optimizer state from NVMe, CpuAdam over the same elements in memory, and writing every
// sub-group back. Goal: step / max(read, Adam, write) <= 1.2 (the pipeline hides all but the slowest).
// Usage: offload_step_benchmark DIR ELEMENTS [SUB_GROUP_ELEMENTS] [BUFFERS] [THREADS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "offload/host_buffer.h"
#include "offload/zero_offload_optimizer.h"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One pass over `groups` regions of `region` bytes with up to `buffers` transfers in flight.
double stream_pass(offload::NvmeStore& store, offload::FileId file, std::int64_t groups, std::size_t region,
                   std::vector<offload::HostBuffer>& buffers, bool write) {
  std::vector<offload::IoRequest> in_flight(buffers.size());
  std::vector<bool> busy(buffers.size(), false);
  const Clock::time_point start = Clock::now();
  for (std::int64_t group = 0; group < groups; ++group) {
    const std::size_t slot = static_cast<std::size_t>(group) % buffers.size();
    if (busy[slot]) store.wait(in_flight[slot]);
    const auto offset = static_cast<std::uint64_t>(group) * region;
    in_flight[slot] = write ? store.write_async(file, offset, buffers[slot].data(), region)
                            : store.read_async(file, offset, buffers[slot].data(), region);
    busy[slot] = true;
  }
  store.wait_all();
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR ELEMENTS [SUB_GROUP_ELEMENTS] [BUFFERS] [THREADS]\n", argv[0]);
    return 2;
  }
  const std::string directory = argv[1];
  const std::int64_t elements = std::atoll(argv[2]);
  const std::int64_t group_elements = argc > 3 ? std::atoll(argv[3]) : std::int64_t{8} << 20;
  const int buffers = argc > 4 ? std::atoi(argv[4]) : 4;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  const std::size_t chunk = std::size_t{1} << 20;

  // The parts alone.
  PinnedHostAllocator pinned;
  const std::size_t region = (3 * static_cast<std::size_t>(group_elements) * sizeof(float) + chunk - 1) / chunk * chunk;
  const std::int64_t groups = (elements + group_elements - 1) / group_elements;
  double read_seconds = 0, write_seconds = 0, adam_seconds = 0;
  {
    offload::NvmeStore store(offload::NvmeStoreOptions{directory + "/parts", 32, chunk, true});
    const offload::FileId file = store.create_file("state.bin", static_cast<std::uint64_t>(groups) * region);
    std::vector<offload::HostBuffer> slots;
    std::vector<std::span<std::byte>> spans;
    for (int i = 0; i < buffers; ++i) {
      slots.emplace_back(&pinned, region, MemoryCategory::staging, store.alignment());
      std::fill_n(slots.back().as<std::byte>(), region, std::byte{1});
      spans.push_back(slots.back().span());
    }
    store.register_buffers(spans);
    stream_pass(store, file, groups, region, slots, true);  // every chunk written once (checksums exist)
    write_seconds = stream_pass(store, file, groups, region, slots, true);
    read_seconds = stream_pass(store, file, groups, region, slots, false);
  }
  {
    offload::CpuAdamOptions options;
    options.threads = threads;
    offload::CpuAdam adam(options);
    std::vector<float> master(static_cast<std::size_t>(elements), 0.5f), m(master.size()), v(master.size()), g(master.size(), 1e-3f);
    std::vector<std::uint16_t> out(master.size());
    const offload::AdamWSpan span{master.data(), m.data(), v.data(), g.data(), out.data(), DType::bf16, elements, true};
    adam.step({&span, 1}, {}, 1, 1.0f);
    const Clock::time_point start = Clock::now();
    adam.step({&span, 1}, {}, 2, 1.0f);
    adam_seconds = seconds_since(start);
  }

  // The pipelined step on a cpu device with one bf16 parameter of `elements`.
  auto device = create_device(DeviceOptions{});
  const Tensor parameter = Tensor::zeros(*device, {elements}, DType::bf16, MemoryCategory::parameters, "parameter");
  offload::ZeroOffloadSettings settings;
  settings.device = offload::OffloadDevice::nvme;
  settings.nvme_path = directory + "/step";
  settings.sub_group_elements = group_elements;
  settings.buffer_count = buffers;
  settings.adam.threads = threads;
  offload::ZeroOffloadOptimizer optimizer(*device, {{"parameter", &parameter, true}}, {}, settings);
  optimizer.step(1e-3f, 1.0f);
  optimizer.step(1e-3f, 1.0f);
  const offload::OffloadStepTimes& times = optimizer.last_step_times();
  const double slowest = std::max({read_seconds, adam_seconds, write_seconds});
  std::printf("elements %lld, sub-group %lld (%lld groups of %.1f MiB), %d buffers, CpuAdam %s x %d threads\n",
              static_cast<long long>(elements), static_cast<long long>(group_elements), static_cast<long long>(groups),
              static_cast<double>(region) / 1048576.0, buffers, std::string(offload::simd_level_name(optimizer.adam().simd())).c_str(),
              optimizer.adam().threads());
  const double bytes = static_cast<double>(groups) * static_cast<double>(region);
  std::printf("alone:     read %.3f s (%.2f GB/s) | CpuAdam %.3f s | write %.3f s (%.2f GB/s) | read+write %.3f s\n", read_seconds,
              bytes / read_seconds / 1e9, adam_seconds, write_seconds, bytes / write_seconds / 1e9, read_seconds + write_seconds);
  std::printf("pipelined: step %.3f s (read wait %.3f, Adam %.3f, write wait %.3f, copy back %.3f)\n", times.step, times.read_wait,
              times.adam, times.write_wait, times.copy_back);
  std::printf("step / max(read, Adam, write) = %.2f (goal <= 1.2); step / (read + write) = %.2f\n", times.step / slowest,
              times.step / (read_seconds + write_seconds));
  std::filesystem::remove_all(directory + "/parts");
  std::filesystem::remove_all(directory + "/step");
  return 0;
}
