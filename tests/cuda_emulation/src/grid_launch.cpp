// Kernel launches on the emulator: the runtime's configuration checks, then every block of the grid run
// in each schedule order of FERRY_CUDA_EMULATION_ORDERS (default forward,reverse,random) from the same
// device memory, which must end identical byte for byte. Launches run one at a time, as on one stream.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "block_run.h"
#include "cuda_emulation/grid_launch.h"
#include "cuda_emulation/stream_work.h"
#include "device_memory.h"

namespace ferry::cuda_emulation {

void set_last_error(cudaError_t error);  // runtime.cpp

namespace {

struct EmulationSettings {
  std::vector<ScheduleOrder> orders;
  std::uint64_t seed = 1;
};

// FERRY_CUDA_EMULATION_ORDERS: comma-separated forward, reverse, random; FERRY_CUDA_EMULATION_SEED: the
// random order's seed. Read once.
const EmulationSettings& settings() {
  static const EmulationSettings parsed = [] {
    EmulationSettings result;
    const char* orders = std::getenv("FERRY_CUDA_EMULATION_ORDERS");
    std::stringstream list(orders != nullptr ? orders : "forward,reverse,random");
    for (std::string name; std::getline(list, name, ',');) {
      if (name == "forward") result.orders.push_back(ScheduleOrder::forward);
      else if (name == "reverse") result.orders.push_back(ScheduleOrder::reverse);
      else if (name == "random") result.orders.push_back(ScheduleOrder::random);
      else throw EmulationError("FERRY_CUDA_EMULATION_ORDERS: unknown order '" + name + "' (forward, reverse, random)");
    }
    if (result.orders.empty()) result.orders.push_back(ScheduleOrder::forward);
    if (const char* seed = std::getenv("FERRY_CUDA_EMULATION_SEED")) result.seed = std::strtoull(seed, nullptr, 10);
    return result;
  }();
  return parsed;
}

// The emulated GPU runs one launch at a time (its fiber stacks, snapshot buffers and launch count go with it).
struct Executor {
  std::mutex mutex;
  FiberStacks stacks;
  std::uint64_t launches = 0;
  DeviceMemory::Snapshot before, first;
};
Executor& executor() {
  static Executor instance;
  return instance;
}

bool valid_configuration(dim3 grid, dim3 block, std::size_t dynamic_shared_bytes) {
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  return grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 0x7fffffffu && grid.y <= 65535 && grid.z <= 65535 && threads >= 1 &&
         threads <= 1024 && block.x <= 1024 && block.y <= 1024 && block.z <= 64 && dynamic_shared_bytes <= 48 * 1024;
}

std::string describe(const KernelSite& site, dim3 grid, dim3 block) {
  std::ostringstream text;
  text << site.kernel << " (" << site.file << ":" << site.line << ") on a grid of (" << grid.x << ", " << grid.y << ", " << grid.z
       << ") blocks of (" << block.x << ", " << block.y << ", " << block.z << ")";
  return text.str();
}

void run_grid(dim3 grid, dim3 block, std::size_t dynamic_shared_bytes, ScheduleOrder order, std::uint64_t seed,
              const std::function<void()>& thread_body, FiberStacks& stacks) {
  const std::uint64_t count = std::uint64_t{grid.x} * grid.y * grid.z;
  std::vector<std::uint64_t> blocks(count);
  std::iota(blocks.begin(), blocks.end(), std::uint64_t{0});
  std::mt19937_64 random(seed);
  if (order == ScheduleOrder::reverse) std::reverse(blocks.begin(), blocks.end());
  if (order == ScheduleOrder::random) std::shuffle(blocks.begin(), blocks.end(), random);
  for (const std::uint64_t linear : blocks) {
    const uint3 index{static_cast<unsigned int>(linear % grid.x), static_cast<unsigned int>(linear / grid.x % grid.y),
                      static_cast<unsigned int>(linear / (std::uint64_t{grid.x} * grid.y))};
    BlockRun run(BlockShape{grid, block, index, dynamic_shared_bytes}, order, seed ^ (linear * 0x9e3779b97f4a7c15ull), thread_body, stacks);
    run.run();
  }
}

}  // namespace

void launch(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes, cudaStream_t stream,
            std::span<const ArgumentBytes> arguments, const std::function<void()>& thread_body) {
  finish_deferred_work(stream);  // the launch runs now: after what its stream deferred
  if (!valid_configuration(grid, block, dynamic_shared_bytes)) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  const EmulationSettings& configured = settings();
  Executor& gpu = executor();
  std::lock_guard lock(gpu.mutex);
  const std::uint64_t seed = configured.seed + 0x51ed27ull * ++gpu.launches;
  DeviceMemory& memory = DeviceMemory::instance();
  try {
    if (configured.orders.size() == 1) {
      run_grid(grid, block, dynamic_shared_bytes, configured.orders[0], seed, thread_body, gpu.stacks);
      return;
    }
    // Only what the arguments point into can change (kernels reach device memory through them alone).
    std::vector<DeviceMemory::Allocation> reachable;
    for (const ArgumentBytes& argument : arguments) memory.add_allocations_pointed_to(argument.data, argument.size, reachable);
    memory.take(reachable, gpu.before);
    run_grid(grid, block, dynamic_shared_bytes, configured.orders[0], seed, thread_body, gpu.stacks);
    memory.take(reachable, gpu.first);
    for (std::size_t other = 1; other < configured.orders.size(); ++other) {
      memory.restore(gpu.before);
      run_grid(grid, block, dynamic_shared_bytes, configured.orders[other], seed, thread_body, gpu.stacks);
      if (const auto difference = memory.first_difference(gpu.first)) {
        throw EmulationError(std::string("results differ between the ") + schedule_order_name(configured.orders[0]) + " and " +
                             schedule_order_name(configured.orders[other]) + " schedule orders (seed " + std::to_string(seed) +
                             "): " + *difference + "; a missing __syncthreads, or threads racing on shared or global memory");
      }
    }
  } catch (const EmulationError& error) {
    throw EmulationError("cuda emulation: " + describe(site, grid, block) + ": " + error.what());
  }
}

}  // namespace ferry::cuda_emulation
