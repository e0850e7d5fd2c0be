#include "block_run.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "cuda_emulation/grid_launch.h"

#if defined(__SANITIZE_ADDRESS__)
#define FERRY_FIBERS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_FIBERS_UNDER_ASAN 1
#endif
#endif
#ifdef FERRY_FIBERS_UNDER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace ferry::cuda_emulation {
namespace {

// See BlockRun::current(): the block being run on this OS thread.
thread_local BlockRun* running_block = nullptr;

// AddressSanitizer follows stack switches only when told (else it reports false stack overflows).
void start_switch(void** fake_stack_save, const void* bottom, std::size_t size) {
#ifdef FERRY_FIBERS_UNDER_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}
void finish_switch(void* fake_stack_save, const void** bottom_old, std::size_t* size_old) {
#ifdef FERRY_FIBERS_UNDER_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#else
  (void)fake_stack_save, (void)bottom_old, (void)size_old;
#endif
}

BlockRun& require_running(const char* what) {
  if (running_block == nullptr) {
    std::fprintf(stderr, "cuda emulation: %s called outside a kernel run by the emulator\n", what);
    std::abort();
  }
  return *running_block;
}

std::string format_dim(const uint3& value) {
  return "(" + std::to_string(value.x) + ", " + std::to_string(value.y) + ", " + std::to_string(value.z) + ")";
}

}  // namespace

const char* schedule_order_name(ScheduleOrder order) {
  switch (order) {
    case ScheduleOrder::forward: return "forward";
    case ScheduleOrder::reverse: return "reverse";
    case ScheduleOrder::random: return "random";
  }
  return "?";
}

// ---- fiber stacks ---------------------------------------------------------------------------------

FiberStacks::~FiberStacks() {
  for (std::byte* stack : stacks_) ::munmap(stack, kStackBytes);
}

std::byte* FiberStacks::stack(std::size_t index) {
  while (stacks_.size() <= index) {
    void* memory = ::mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) throw EmulationError("cuda emulation: no memory for a fiber stack");
    stacks_.push_back(static_cast<std::byte*>(memory));
  }
  return stacks_[index];
}

std::vector<FiberThread>& FiberStacks::threads(std::size_t count) {
  if (threads_.size() < count) {
    threads_.resize(count);
    // A ucontext_t points into itself (its saved floating-point state): moved, it must be made again.
    for (FiberThread& thread : threads_) thread.context_initialized = false;
  }
  return threads_;
}

void FiberStacks::clear_abandoned() {
  if (!abandoned_) return;
#ifdef FERRY_FIBERS_UNDER_ASAN
  for (std::byte* stack : stacks_) __asan_unpoison_memory_region(stack, kStackBytes);
#endif
  abandoned_ = false;
}

// ---- the block --------------------------------------------------------------------------------------

void BlockRun::FreeDeleter::operator()(void* memory) const { std::free(memory); }

BlockRun::BlockRun(const BlockShape& shape, ScheduleOrder order, std::uint64_t seed, const std::function<void()>& thread_body,
                   FiberStacks& stacks)
    : shape_(shape),
      order_(order),
      random_(seed),
      thread_body_(thread_body),
      stacks_(stacks),
      threads_(stacks.threads(std::size_t{shape.block.x} * shape.block.y * shape.block.z)),
      thread_count_(std::size_t{shape.block.x} * shape.block.y * shape.block.z) {
  warps_.resize((thread_count_ + 31) / 32);
  for (std::size_t index = 0; index < thread_count_; ++index) {
    const auto linear = static_cast<unsigned int>(index);
    Thread& thread = threads_[index];
    thread.position = ThreadPosition{uint3{linear % shape.block.x, linear / shape.block.x % shape.block.y, linear / (shape.block.x * shape.block.y)},
                                     shape.block_index, uint3(shape.block), uint3(shape.grid)};
    thread.status = Status::runnable;
    thread.exchange_generation = 0;
    thread.fake_stack = nullptr;
    ++warps_[index / 32].lanes;
  }
  if (shape.dynamic_shared_bytes > 0) {
    dynamic_shared_.reset(static_cast<std::byte*>(std::malloc(shape.dynamic_shared_bytes)));
    if (!dynamic_shared_) throw EmulationError("cuda emulation: no memory for dynamic shared memory");
    std::memset(dynamic_shared_.get(), 0xff, shape.dynamic_shared_bytes);
  }
}

BlockRun::~BlockRun() {
  if (running_block == this) running_block = nullptr;
}

BlockRun* BlockRun::current() { return running_block; }

void BlockRun::fiber_entry(unsigned int high, unsigned int low) {
  auto* block = reinterpret_cast<BlockRun*>(static_cast<std::uintptr_t>(high) << 32 | low);
  block->thread_main();
  // Returning follows uc_link back to the scheduler; this fiber is finished for good.
}

void BlockRun::thread_main() {
  finish_switch(nullptr, &scheduler_stack_bottom_, &scheduler_stack_size_);
  thread_body_();
  Thread& thread = threads_[current_];
  thread.status = Status::exited;
  ++exited_;
  Warp& warp = warps_[current_ / 32];
  if (warp.arrived > 0 && (warp.mask >> lane() & 1u) != 0) {
    error_ = "thread " + format_dim(thread.position.thread_index) + " exited while lanes of its warp wait for it at a warp exchange";
  }
  release_block_barrier_if_complete();
  start_switch(nullptr, scheduler_stack_bottom_, scheduler_stack_size_);
}

void BlockRun::resume(std::size_t index) {
  current_ = index;
  running_block = this;
  Thread& thread = threads_[index];
  std::byte* stack = stacks_.stack(index);
  void* fake_stack = nullptr;
  start_switch(&fake_stack, stack, FiberStacks::kStackBytes);
  swapcontext(&scheduler_context_, &thread.context);
  finish_switch(fake_stack, nullptr, nullptr);
  running_block = nullptr;
}

void BlockRun::yield_to_scheduler() {
  Thread& thread = threads_[current_];
  start_switch(&thread.fake_stack, scheduler_stack_bottom_, scheduler_stack_size_);
  swapcontext(&thread.context, &scheduler_context_);
  finish_switch(thread.fake_stack, &scheduler_stack_bottom_, &scheduler_stack_size_);
}

void BlockRun::fail(const std::string& message) {
  if (!error_) error_ = message;
  stacks_.mark_abandoned();
  start_switch(nullptr, scheduler_stack_bottom_, scheduler_stack_size_);
  setcontext(&scheduler_context_);
  std::abort();  // setcontext returns only on failure
}

void BlockRun::run() {
  stacks_.clear_abandoned();
  const auto self = reinterpret_cast<std::uintptr_t>(this);
  for (std::size_t index = 0; index < thread_count_; ++index) {
    Thread& thread = threads_[index];
    if (!thread.context_initialized && getcontext(&thread.context) != 0) throw EmulationError("cuda emulation: getcontext failed");
    thread.context_initialized = true;
    thread.context.uc_stack.ss_sp = stacks_.stack(index);
    thread.context.uc_stack.ss_size = FiberStacks::kStackBytes;
    thread.context.uc_link = &scheduler_context_;
    makecontext(&thread.context, reinterpret_cast<void (*)()>(&BlockRun::fiber_entry), 2, static_cast<unsigned int>(self >> 32),
                static_cast<unsigned int>(self & 0xffffffffu));
  }
  std::vector<std::size_t> runnable;
  while (exited_ < thread_count_) {
    runnable.clear();
    for (std::size_t index = 0; index < thread_count_; ++index) {
      if (threads_[index].status == Status::runnable) runnable.push_back(index);
    }
    if (runnable.empty()) error_ = "deadlock: " + describe_waiting();
    if (order_ == ScheduleOrder::reverse) std::reverse(runnable.begin(), runnable.end());
    if (order_ == ScheduleOrder::random) std::shuffle(runnable.begin(), runnable.end(), random_);
    for (std::size_t index : runnable) {
      if (error_) break;
      resume(index);
    }
    if (error_) {
      if (exited_ < thread_count_) stacks_.mark_abandoned();
      throw EmulationError("block " + format_dim(shape_.block_index) + " of a grid " + format_dim(shape_.grid) + " of blocks " +
                           format_dim(shape_.block) + ", " + schedule_order_name(order_) + " order: " + *error_);
    }
  }
}

std::string BlockRun::describe_waiting() const {
  std::size_t at_barrier = 0, at_exchange = 0;
  for (std::size_t index = 0; index < thread_count_; ++index) {
    const Thread& thread = threads_[index];
    at_barrier += thread.status == Status::at_block_barrier ? 1 : 0;
    at_exchange += thread.status == Status::at_warp_exchange ? 1 : 0;
  }
  return std::to_string(at_barrier) + " threads wait at __syncthreads, " + std::to_string(at_exchange) +
         " at a warp exchange, " + std::to_string(exited_) + " have exited";
}

// ---- what device code calls -------------------------------------------------------------------------

void BlockRun::release_block_barrier_if_complete() {
  if (at_barrier_ == 0 || at_barrier_ + exited_ < thread_count_) return;
  for (std::size_t index = 0; index < thread_count_; ++index) {
    if (threads_[index].status == Status::at_block_barrier) threads_[index].status = Status::runnable;
  }
  at_barrier_ = 0;
}

void BlockRun::sync_threads() {
  Thread& thread = threads_[current_];
  thread.status = Status::at_block_barrier;
  ++at_barrier_;
  release_block_barrier_if_complete();
  if (thread.status != Status::runnable) yield_to_scheduler();
}

const std::uint64_t* BlockRun::warp_exchange(unsigned int mask, std::uint64_t value) {
  const int lane_index = lane();
  Warp& warp = warps_[current_ / 32];
  const unsigned int existing = warp.lanes == 32 ? 0xffffffffu : (1u << warp.lanes) - 1u;
  const auto where = [&] {
    char text[160];
    std::snprintf(text, sizeof text, "lane %d of warp %zu, mask 0x%08x: ", lane_index, current_ / 32, mask);
    return std::string(text);
  };
  if ((mask >> lane_index & 1u) == 0) fail(where() + "a warp exchange whose mask leaves out the calling lane");
  if ((mask & ~existing) != 0) fail(where() + "the mask names lanes the block does not have");
  for (unsigned int other = 0; other < warp.lanes; ++other) {
    if ((mask >> other & 1u) != 0 && threads_[current_ / 32 * 32 + other].status == Status::exited) {
      fail(where() + "the mask names lane " + std::to_string(other) + ", which has exited");
    }
  }
  if (warp.arrived == 0) {
    warp.mask = mask;
  } else if (warp.mask != mask) {
    fail(where() + "lanes meet at one warp exchange with different masks");
  }
  const std::uint64_t generation = warp.generation;
  warp.deposits[generation & 1u][lane_index] = value;
  Thread& thread = threads_[current_];
  thread.exchange_generation = generation;
  if (++warp.arrived == static_cast<unsigned int>(std::popcount(mask))) {
    warp.arrived = 0;
    ++warp.generation;
    for (unsigned int other = 0; other < warp.lanes; ++other) {
      Thread& lane_thread = threads_[current_ / 32 * 32 + other];
      if ((mask >> other & 1u) != 0 && lane_thread.status == Status::at_warp_exchange) lane_thread.status = Status::runnable;
    }
  } else {
    thread.status = Status::at_warp_exchange;
    yield_to_scheduler();
  }
  return warp.deposits[generation & 1u];
}

void BlockRun::require_lane_in_mask(unsigned int mask, int source, const char* what) {
  if (source < 0 || source >= 32 || (mask >> source & 1u) == 0) {
    fail(std::string(what) + " on lane " + std::to_string(lane()) + " reads lane " + std::to_string(source) +
         ", which is not in its mask");
  }
}

void* BlockRun::shared_variable(const void* site, std::size_t bytes) {
  auto found = shared_.find(site);
  if (found != shared_.end()) return found->second.get();
  std::unique_ptr<std::byte, FreeDeleter> memory(static_cast<std::byte*>(std::malloc(bytes)));
  if (!memory) fail("no host memory for " + std::to_string(bytes) + " bytes of shared memory");
  std::memset(memory.get(), 0xff, bytes);
  void* address = memory.get();
  shared_.emplace(site, std::move(memory));
  return address;
}

// ---- device_functions.h's entry points ----------------------------------------------------------------

const ThreadPosition& current_position() { return require_running("threadIdx/blockIdx/blockDim/gridDim").position(); }
void sync_threads() { require_running("__syncthreads").sync_threads(); }
int lane_id() { return require_running("a warp function").lane(); }
const std::uint64_t* warp_exchange(unsigned int mask, std::uint64_t value) {
  return require_running("a warp exchange").warp_exchange(mask, value);
}
void require_lane_in_mask(unsigned int mask, int source, const char* what) {
  require_running(what).require_lane_in_mask(mask, source, what);
}
void* shared_variable(const void* site, std::size_t bytes) { return require_running("__shared__").shared_variable(site, bytes); }
void* dynamic_shared_memory() { return require_running("extern __shared__").dynamic_shared_memory(); }

}  // namespace ferry::cuda_emulation
