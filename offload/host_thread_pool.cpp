#include "offload/host_thread_pool.h"

#include <hwloc.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace ferry::offload {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* topology) const { hwloc_topology_destroy(topology); }
};
using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* bitmap) const { hwloc_bitmap_free(bitmap); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Topology load_topology() {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) return nullptr;
  Topology owned(topology);
  if (hwloc_topology_load(topology) != 0) return nullptr;
  return owned;
}

// The CPU set of each core the process may run on (a core's PUs restricted to the process's binding),
// in hwloc's logical order; PUs stand in for cores when the topology has none.
std::vector<Bitmap> process_cores(hwloc_topology_t topology) {
  std::vector<Bitmap> cores;
  Bitmap allowed(hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topology)));
  Bitmap bound(hwloc_bitmap_alloc());
  if (!allowed || !bound) return cores;
  if (hwloc_get_cpubind(topology, bound.get(), HWLOC_CPUBIND_PROCESS) == 0) {
    hwloc_bitmap_and(allowed.get(), allowed.get(), bound.get());
  }
  for (hwloc_obj_type_t type : {HWLOC_OBJ_CORE, HWLOC_OBJ_PU}) {
    hwloc_obj_t object = nullptr;
    while ((object = hwloc_get_next_obj_by_type(topology, type, object)) != nullptr) {
      Bitmap set(hwloc_bitmap_alloc());
      if (!set) continue;
      hwloc_bitmap_and(set.get(), object->cpuset, allowed.get());
      if (!hwloc_bitmap_iszero(set.get())) cores.push_back(std::move(set));
    }
    if (!cores.empty()) break;
  }
  return cores;
}

int hardware_threads() {
  const unsigned count = std::thread::hardware_concurrency();
  return count == 0 ? 1 : static_cast<int>(count);
}

}  // namespace

int HostThreadPool::cores_in_process_cpuset() {
  const Topology topology = load_topology();
  if (!topology) return hardware_threads();
  const std::size_t cores = process_cores(topology.get()).size();
  return cores == 0 ? hardware_threads() : static_cast<int>(cores);
}

HostThreadPool::HostThreadPool(int threads, bool bind_threads) {
  if (threads < 0) throw std::invalid_argument("HostThreadPool: threads must be >= 0, got " + std::to_string(threads));
  Topology topology;
  std::vector<Bitmap> cores;
  if (threads == 0 || (bind_threads && threads > 1)) {
    topology = load_topology();
    if (topology) cores = process_cores(topology.get());
  }
  if (threads == 0) threads = cores.empty() ? hardware_threads() : static_cast<int>(cores.size());

  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });

  if (!bind_threads || workers_.empty()) return;
  if (!topology || cores.empty()) {
    binding_note_ = "hwloc could not load the topology or found no cores; workers are not bound";
    return;
  }
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const Bitmap& core = cores[(i + 1) % cores.size()];
    if (hwloc_set_thread_cpubind(topology.get(), workers_[i].native_handle(), core.get(), HWLOC_CPUBIND_THREAD) == 0) {
      ++bound_workers_;
    } else if (binding_note_.empty()) {
      binding_note_ = "hwloc_set_thread_cpubind failed for worker " + std::to_string(i + 1) + "; some workers are not bound";
    }
  }
}

HostThreadPool::~HostThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void HostThreadPool::work_on(const Job& job) {
  for (;;) {
    const std::int64_t index = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (index >= job.task_count) return;
    try {
      job.invoke(job.context, index);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(job.task_count, std::memory_order_relaxed);  // skip what has not started
    }
  }
}

void HostThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    work_on(job);
    {
      std::lock_guard lock(mutex_);
      if (--workers_busy_ == 0) work_done_.notify_one();
    }
  }
}

void HostThreadPool::run_erased(std::int64_t task_count, void* context, Invoke invoke) {
  if (task_count <= 0) return;
  std::lock_guard run_lock(run_mutex_);
  if (workers_.empty() || task_count == 1) {
    for (std::int64_t i = 0; i < task_count; ++i) invoke(context, i);
    return;
  }
  const Job job{context, invoke, task_count};
  {
    std::lock_guard lock(mutex_);
    job_ = job;
    error_ = nullptr;
    next_task_.store(0, std::memory_order_relaxed);
    workers_busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  work_on(job);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    work_done_.wait(lock, [&] { return workers_busy_ == 0; });
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ferry::offload
