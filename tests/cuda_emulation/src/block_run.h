// One thread block of an emulated launch: every CUDA thread is a fiber (ucontext) on the calling OS
// thread that runs until it exits or waits at __syncthreads or a warp exchange; each round the block
// resumes its runnable threads in a schedule order (forward, reverse or seeded random).
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulation/device_functions.h"

namespace ferry::cuda_emulation {

enum class ScheduleOrder { forward, reverse, random };
const char* schedule_order_name(ScheduleOrder order);

enum class ThreadStatus { runnable, at_block_barrier, at_warp_exchange, exited };

// One emulated CUDA thread: its fiber's context and where it is in the block.
struct FiberThread {
  ucontext_t context;
  bool context_initialized = false;  // by getcontext, once: later blocks only makecontext it again
  ThreadPosition position;
  ThreadStatus status = ThreadStatus::runnable;
  std::uint64_t exchange_generation = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, saved across switches
};

// Fiber stacks (mmap'd, committed as touched) and thread records, reused by every block of every launch.
class FiberStacks {
 public:
  // Kernels keep little on their stacks; AddressSanitizer clears a stack's shadow at every switch to
  // it, so larger stacks cost time on every __syncthreads.
  static constexpr std::size_t kStackBytes = std::size_t{64} << 10;
  FiberStacks() = default;
  ~FiberStacks();
  FiberStacks(const FiberStacks&) = delete;
  FiberStacks& operator=(const FiberStacks&) = delete;

  // The lowest address of stack `index`, made on first use.
  std::byte* stack(std::size_t index);
  // `count` thread records (their contexts kept from earlier blocks).
  std::vector<FiberThread>& threads(std::size_t count);
  // A fiber left its stack without returning (a failed launch): its frames' sanitizer poison is
  // cleared before the stacks are used again.
  void mark_abandoned() { abandoned_ = true; }
  void clear_abandoned();

 private:
  std::vector<std::byte*> stacks_;
  std::vector<FiberThread> threads_;
  bool abandoned_ = false;
};

struct BlockShape {
  dim3 grid;
  dim3 block;
  uint3 block_index;
  std::size_t dynamic_shared_bytes;
};

class BlockRun {
 public:
  BlockRun(const BlockShape& shape, ScheduleOrder order, std::uint64_t seed, const std::function<void()>& thread_body,
           FiberStacks& stacks);
  ~BlockRun();
  BlockRun(const BlockRun&) = delete;
  BlockRun& operator=(const BlockRun&) = delete;

  // Runs every thread to its end. Throws EmulationError for a deadlock or a bad warp exchange.
  void run();

  // Called by the running emulated thread (device_functions.h).
  const ThreadPosition& position() const { return threads_[current_].position; }
  int lane() const { return static_cast<int>(current_ % 32); }
  void sync_threads();
  const std::uint64_t* warp_exchange(unsigned int mask, std::uint64_t value);
  void require_lane_in_mask(unsigned int mask, int source, const char* what);
  void* shared_variable(const void* site, std::size_t bytes);
  void* dynamic_shared_memory() { return dynamic_shared_.get(); }

  // The block the calling OS thread runs now, or null: the one piece of global state the emulation
  // needs (device code has no other way to find its block), thread-local and set only while running.
  static BlockRun* current();

 private:
  using Status = ThreadStatus;
  using Thread = FiberThread;
  struct Warp {
    unsigned int lanes = 0;           // lanes the block has in this warp
    unsigned int mask = 0;            // of the exchange in progress
    unsigned int arrived = 0;
    std::uint64_t generation = 0;     // exchanges completed
    std::uint64_t deposits[2][32] = {};  // by generation parity: lanes of the last one may still read theirs
  };
  struct FreeDeleter {
    void operator()(void* memory) const;
  };

  static void fiber_entry(unsigned int high, unsigned int low);
  void thread_main();
  void resume(std::size_t index);
  void yield_to_scheduler();
  [[noreturn]] void fail(const std::string& message);
  void release_block_barrier_if_complete();
  std::string describe_waiting() const;

  BlockShape shape_;
  ScheduleOrder order_;
  std::mt19937_64 random_;
  const std::function<void()>& thread_body_;
  FiberStacks& stacks_;
  std::vector<Thread>& threads_;  // the first thread_count_ of them
  std::size_t thread_count_;
  std::vector<Warp> warps_;
  std::size_t current_ = 0;
  std::size_t exited_ = 0;
  std::size_t at_barrier_ = 0;
  std::optional<std::string> error_;
  ucontext_t scheduler_context_{};
  const void* scheduler_stack_bottom_ = nullptr;
  std::size_t scheduler_stack_size_ = 0;
  std::map<const void*, std::unique_ptr<std::byte, FreeDeleter>> shared_;
  std::unique_ptr<std::byte, FreeDeleter> dynamic_shared_;
};

}  // namespace ferry::cuda_emulation
