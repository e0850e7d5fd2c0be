// NvmeStore throughput: writes then reads one file of --size bytes through the store in requests
// taken from a registered host buffer cycled in four slots (so the queue stays full while a slot is
// reused), chunk --chunk and queue depth --queue-depth, checksums included. Prints GB/s (10^9 B/s);
// benchmarks/nvme_store_benchmark.sh runs it beside fio on the same directory.
//   nvme_store_benchmark --directory DIR [--size 1GiB] [--chunk 1MiB] [--queue-depth 32]
//                        [--direction both|write|read] [--buffer 1GiB] [--keep]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/byte_size.h"
#include "offload/nvme_store.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t slot_count = 4;
constexpr const char* file_name = "nvme_store_benchmark.bin";

struct Settings {
  std::string directory;
  std::size_t size = std::size_t{1} << 30;
  std::size_t chunk = std::size_t{1} << 20;
  unsigned queue_depth = 32;
  std::string direction = "both";
  std::size_t buffer = std::size_t{1} << 30;
  bool keep = false;
};

Settings parse(int argc, char** argv) {
  Settings settings;
  for (int index = 1; index < argc; ++index) {
    const std::string_view flag = argv[index];
    const auto value = [&]() -> std::string {
      if (index + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
      return argv[++index];
    };
    if (flag == "--directory") settings.directory = value();
    else if (flag == "--size") settings.size = ferry::parse_byte_size(value());
    else if (flag == "--chunk") settings.chunk = ferry::parse_byte_size(value());
    else if (flag == "--queue-depth") settings.queue_depth = static_cast<unsigned>(std::stoul(value()));
    else if (flag == "--direction") settings.direction = value();
    else if (flag == "--buffer") settings.buffer = ferry::parse_byte_size(value());
    else if (flag == "--keep") settings.keep = true;
    else throw std::invalid_argument("unknown flag " + std::string(flag));
  }
  if (settings.directory.empty()) throw std::invalid_argument("--directory is required");
  if (settings.direction != "both" && settings.direction != "write" && settings.direction != "read") {
    throw std::invalid_argument("--direction is both, write or read");
  }
  return settings;
}

struct FreeMemory {
  void operator()(std::byte* memory) const { std::free(memory); }
};

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& time) { return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Moves the whole file in slot-sized requests, reusing a slot only after its previous request is done.
double transfer(ferry::offload::NvmeStore& store, ferry::offload::FileId file, ferry::offload::IoDirection direction,
                std::byte* buffer, std::size_t slot_bytes, std::size_t size) {
  std::vector<ferry::offload::IoRequest> in_slot(slot_count, 0);
  const auto start = Clock::now();
  std::size_t slot = 0;
  for (std::size_t offset = 0; offset < size; offset += slot_bytes, slot = (slot + 1) % slot_count) {
    if (in_slot[slot] != 0) store.wait(in_slot[slot]);
    const std::size_t bytes = std::min(slot_bytes, size - offset);
    std::byte* memory = buffer + slot * slot_bytes;
    in_slot[slot] = direction == ferry::offload::IoDirection::write ? store.write_async(file, offset, memory, bytes)
                                                                    : store.read_async(file, offset, memory, bytes);
  }
  store.wait_all();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Settings settings = parse(argc, argv);
    ferry::offload::NvmeStoreOptions options;
    options.directory = settings.directory;
    options.chunk_bytes = settings.chunk;
    options.queue_depth = settings.queue_depth;
    ferry::offload::NvmeStore store(options);

    const std::size_t slot_bytes =
        std::max(settings.chunk, std::min(settings.buffer, settings.size) / slot_count / settings.chunk * settings.chunk);
    const std::size_t buffer_bytes = slot_bytes * slot_count;
    std::unique_ptr<std::byte, FreeMemory> buffer(static_cast<std::byte*>(std::aligned_alloc(4096, buffer_bytes)));
    if (!buffer) throw std::runtime_error("cannot allocate the host buffer");
    std::uint64_t state = 0x9E3779B97F4A7C15ULL;  // xorshift: incompressible bytes, quickly
    for (std::size_t offset = 0; offset + 8 <= buffer_bytes; offset += 8) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      std::memcpy(buffer.get() + offset, &state, 8);
    }
    const std::span<std::byte> registered(buffer.get(), buffer_bytes);
    store.register_buffers(std::span<const std::span<std::byte>>(&registered, 1));

    const auto reserve_start = Clock::now();
    const ferry::offload::FileId file = store.create_file(file_name, settings.size);
    const double reserve_seconds = std::chrono::duration<double>(Clock::now() - reserve_start).count();
    std::printf("nvme_store_benchmark: %s, size %s, chunk %s, queue depth %u, alignment %zu, buffer %s in %zu slots\n",
                settings.directory.c_str(), ferry::format_bytes(settings.size).c_str(),
                ferry::format_bytes(settings.chunk).c_str(), settings.queue_depth, store.alignment(),
                ferry::format_bytes(buffer_bytes).c_str(), slot_count);
    std::printf("  create_file (ftruncate + fallocate): %.3f s\n", reserve_seconds);
    const double gigabytes = static_cast<double>(settings.size) / 1e9;
    // A read needs the checksums of a write through this store, so a read alone writes first (untimed).
    if (settings.direction == "read") {
      transfer(store, file, ferry::offload::IoDirection::write, buffer.get(), slot_bytes, settings.size);
    }
    for (const auto direction : {ferry::offload::IoDirection::write, ferry::offload::IoDirection::read}) {
      const bool is_write = direction == ferry::offload::IoDirection::write;
      if (settings.direction != "both" && settings.direction != (is_write ? "write" : "read")) continue;
      const double cpu_before = cpu_seconds();
      const double seconds = transfer(store, file, direction, buffer.get(), slot_bytes, settings.size);
      const double cpu = cpu_seconds() - cpu_before;
      std::printf("  %-5s %.3f s  %.3f GB/s  (process CPU %.0f%%)\n", is_write ? "write" : "read", seconds,
                  gigabytes / seconds, 100 * cpu / seconds);
      std::printf("RESULT direction=%s gbps=%.4f cpu=%.3f\n", is_write ? "write" : "read", gigabytes / seconds,
                  cpu / seconds);
    }
    if (!settings.keep) std::filesystem::remove(store.path(file));
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "nvme_store_benchmark: %s\n", error.what());
    return 1;
  }
}
