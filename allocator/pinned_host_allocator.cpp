#include "allocator/pinned_host_allocator.h"

#include <hwloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "allocator/byte_size.h"

#ifdef FERRY_HAVE_CUDA
#include <cuda_runtime.h>
#include <hwloc/cudart.h>

#include "allocator/cuda_check.h"
#endif

namespace ferry {

namespace {

hwloc_topology_t as_topology(void* topology) { return static_cast<hwloc_topology_t>(topology); }

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// The NUMA node whose cpuset intersects `cpuset` first, or -1.
int numa_node_covering(hwloc_topology_t topology, hwloc_const_cpuset_t cpuset) {
  hwloc_obj_t node = nullptr;
  while ((node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node)) != nullptr) {
    if (hwloc_bitmap_intersects(node->cpuset, cpuset)) return static_cast<int>(node->os_index);
  }
  return -1;
}

}  // namespace

PinnedHostAllocator::PinnedHostAllocator() : PinnedHostAllocator(Options{}) {}

PinnedHostAllocator::PinnedHostAllocator(Options options) : options_(options) {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0 || hwloc_topology_load(topology) != 0) {
    throw PinnedMemoryError("hwloc could not read the machine topology");
  }
  topology_ = topology;
  numa_node_ = options_.numa_node;
  hwloc_bitmap_t cpuset = hwloc_bitmap_alloc();
#ifdef FERRY_HAVE_CUDA
  cuda_registered_ = cuda_device_available();
  if (numa_node_ < 0 && cuda_registered_ && hwloc_cudart_get_device_cpuset(topology, 0, cpuset) == 0) {
    numa_node_ = numa_node_covering(topology, cpuset);
  }
#endif
  if (numa_node_ < 0 && hwloc_get_last_cpu_location(topology, cpuset, HWLOC_CPUBIND_THREAD) == 0) {
    numa_node_ = numa_node_covering(topology, cpuset);
  }
  hwloc_bitmap_free(cpuset);
  if (numa_node_ < 0) numa_node_ = 0;
}

PinnedHostAllocator::~PinnedHostAllocator() {
  for (auto& [pointer, buffer] : live_) give_back(pointer, buffer.reserved);
  for (auto& [pointer, reserved] : cached_reserved_) give_back(pointer, reserved);
  hwloc_topology_destroy(as_topology(topology_));
}

std::string PinnedHostAllocator::pinning() const {
  if (cuda_registered_) return "cudaHostRegister";
  return options_.lock_pages ? "mlock" : "none";
}

void* PinnedHostAllocator::obtain(std::size_t bytes, std::size_t reserved) {
  hwloc_topology_t topology = as_topology(topology_);
  void* pointer = nullptr;
  hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topology, static_cast<unsigned>(numa_node_));
  if (node != nullptr) {
    pointer = hwloc_alloc_membind(topology, reserved, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
  }
  if (pointer == nullptr) pointer = hwloc_alloc(topology, reserved);  // binding unsupported: plain pages
  if (pointer == nullptr) {
    throw PinnedMemoryError("pinned host allocation of " + format_bytes(bytes) + " failed: " + std::strerror(errno));
  }
#ifdef FERRY_HAVE_CUDA
  if (cuda_registered_) {
    const cudaError_t status = cudaHostRegister(pointer, reserved, cudaHostRegisterDefault);
    if (status != cudaSuccess) {
      hwloc_free(topology, pointer, reserved);
      throw PinnedMemoryError("cudaHostRegister of " + format_bytes(reserved) + " failed: " +
                              cudaGetErrorString(status));
    }
    return pointer;
  }
#endif
  if (options_.lock_pages && ::mlock(pointer, reserved) != 0) {
    const int error = errno;
    hwloc_free(topology, pointer, reserved);
    rlimit limit{};
    ::getrlimit(RLIMIT_MEMLOCK, &limit);
    throw PinnedMemoryError("mlock of " + format_bytes(reserved) + " of pinned host memory failed (" +
                            std::strerror(error) + "); the locked-memory limit is " +
                            (limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                                             : format_bytes(limit.rlim_cur)) +
                            ": raise it with `ulimit -l unlimited` or use a smaller pinned buffer pool");
  }
  return pointer;
}

void PinnedHostAllocator::give_back(void* pointer, std::size_t reserved) {
#ifdef FERRY_HAVE_CUDA
  if (cuda_registered_) cudaHostUnregister(pointer);
#endif
  if (!cuda_registered_ && options_.lock_pages) ::munlock(pointer, reserved);
  hwloc_free(as_topology(topology_), pointer, reserved);
}

void* PinnedHostAllocator::allocate(std::size_t bytes, MemoryCategory category) {
  if (bytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  const std::size_t page = page_size();
  const std::size_t reserved = (bytes + page - 1) / page * page;
  void* pointer = nullptr;
  if (auto it = cached_.find(bytes); it != cached_.end()) {
    pointer = it->second;
    cached_.erase(it);
    cached_reserved_.erase(pointer);
    ++stats_.cache_hits;
  } else {
    pointer = obtain(bytes, reserved);
    ++stats_.num_host_alloc;
    stats_.reserved_bytes.increase(static_cast<std::int64_t>(reserved));
  }
  live_.emplace(pointer, Buffer{bytes, reserved, category});
  stats_.allocated_bytes.increase(static_cast<std::int64_t>(bytes));
  stats_.category_allocated_bytes[category_index(category)].increase(static_cast<std::int64_t>(bytes));
  return pointer;
}

void PinnedHostAllocator::free(void* pointer) {
  if (pointer == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(pointer);
  if (it == live_.end()) {
    throw InvalidFreeError("free of a pinned host pointer this allocator did not hand out (or a double free)");
  }
  const Buffer buffer = it->second;
  live_.erase(it);
  stats_.allocated_bytes.decrease(static_cast<std::int64_t>(buffer.bytes));
  stats_.category_allocated_bytes[category_index(buffer.category)].decrease(static_cast<std::int64_t>(buffer.bytes));
  cached_.emplace(buffer.bytes, pointer);
  cached_reserved_.emplace(pointer, buffer.reserved);
}

void PinnedHostAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [pointer, reserved] : cached_reserved_) {
    give_back(pointer, reserved);
    ++stats_.num_host_free;
    stats_.reserved_bytes.decrease(static_cast<std::int64_t>(reserved));
  }
  cached_.clear();
  cached_reserved_.clear();
}

PinnedHostStatistics PinnedHostAllocator::statistics() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace ferry
