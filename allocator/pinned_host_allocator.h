// PinnedHostAllocator: page-locked host memory for device<->host copies, placed with hwloc on the
// NUMA node nearest the GPU (or the calling thread's node without one), registered with CUDA when a
// GPU is present and mlock'ed otherwise. Sizes are exact (no power-of-two rounding); freed buffers
// are cached and reused for requests of the same size. Its statistics are its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "allocator/allocator_errors.h"
#include "allocator/allocator_statistics.h"
#include "allocator/memory_category.h"

namespace ferry {

class PinnedMemoryError : public AllocatorError {
 public:
  using AllocatorError::AllocatorError;
};

struct PinnedHostStatistics {
  Stat allocated_bytes;  // exact sizes of live buffers
  Stat reserved_bytes;   // page-rounded bytes held (live + cached)
  std::array<Stat, kNumMemoryCategories> category_allocated_bytes{};
  std::int64_t num_host_alloc = 0;  // buffers obtained from the OS
  std::int64_t num_host_free = 0;   // buffers returned to the OS
  std::int64_t cache_hits = 0;      // requests served from the cache
};

class PinnedHostAllocator {
 public:
  struct Options {
    int numa_node = -1;  // -1: nearest the first GPU, else the calling thread's node
    // Pages locked with mlock (false only for tests that must not lock memory).
    bool lock_pages = true;
  };

  PinnedHostAllocator();
  explicit PinnedHostAllocator(Options options);
  ~PinnedHostAllocator();
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;

  // Throws PinnedMemoryError naming the size and the reason when memory cannot be had or pinned.
  void* allocate(std::size_t bytes, MemoryCategory category = MemoryCategory::staging);
  void free(void* pointer);
  void empty_cache();

  PinnedHostStatistics statistics() const;
  int numa_node() const { return numa_node_; }
  // How buffers are pinned: "cudaHostRegister", "mlock" or "none".
  std::string pinning() const;

 private:
  struct Buffer {
    std::size_t bytes;     // exact size asked
    std::size_t reserved;  // page-rounded size held
    MemoryCategory category;
  };
  void* obtain(std::size_t bytes, std::size_t reserved);
  void give_back(void* pointer, std::size_t reserved);

  Options options_;
  void* topology_ = nullptr;  // hwloc_topology_t
  int numa_node_ = -1;
  bool cuda_registered_ = false;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Buffer> live_;
  std::multimap<std::size_t, void*> cached_;  // exact size -> buffer
  std::unordered_map<void*, std::size_t> cached_reserved_;
  PinnedHostStatistics stats_;
};

}  // namespace ferry
