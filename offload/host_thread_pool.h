// HostThreadPool: a fixed set of std::threads that run N independent tasks and return when all are
// done. Worker i is bound with hwloc to the i-th core of the process's CPU set; the calling thread
// takes tasks too, so a pool of one thread is the caller alone. A task's exception reaches the caller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::offload {

class HostThreadPool {
 public:
  // threads: the caller plus threads - 1 workers; 0 means one per core of the process's CPU set.
  // bind_threads: bind worker i (1 <= i < threads) to core i % cores of that set. The caller (index 0)
  // is never bound: binding it would pin the caller's thread for the rest of its life. A failed
  // binding is not an error; binding_note() says what happened.
  // Throws std::invalid_argument when threads < 0.
  HostThreadPool(int threads, bool bind_threads);
  ~HostThreadPool();
  HostThreadPool(const HostThreadPool&) = delete;
  HostThreadPool& operator=(const HostThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Workers bound to a core (at most threads() - 1), and a note on binding: empty when every worker
  // was bound or binding was not asked for, otherwise why some were not.
  int bound_workers() const { return bound_workers_; }
  const std::string& binding_note() const { return binding_note_; }

  // Calls task(i) once for each i in [0, task_count), spread over the caller and the workers in no
  // fixed order, and returns when all calls have returned. After a task throws, tasks not yet
  // started are skipped and the first exception is rethrown here. One run at a time: concurrent
  // callers wait their turn.
  template <class Task>
  void run(std::int64_t task_count, Task&& task) {
    run_erased(task_count, &task, [](void* context, std::int64_t index) { (*static_cast<Task*>(context))(index); });
  }

  // Cores of this process's CPU set (at least 1), as hwloc counts them; falls back to
  // std::thread::hardware_concurrency when hwloc cannot load the topology.
  static int cores_in_process_cpuset();

 private:
  using Invoke = void (*)(void*, std::int64_t);
  struct Job {
    void* context = nullptr;
    Invoke invoke = nullptr;
    std::int64_t task_count = 0;
  };

  void run_erased(std::int64_t task_count, void* context, Invoke invoke);
  void worker_loop();
  void work_on(const Job& job);

  std::vector<std::thread> workers_;
  int bound_workers_ = 0;
  std::string binding_note_;

  std::mutex run_mutex_;  // one run at a time
  std::mutex mutex_;      // guards everything below
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  Job job_;
  std::uint64_t generation_ = 0;  // bumped per run; workers wait for it to change
  int workers_busy_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;      // the first task exception of this run
  std::atomic<std::int64_t> next_task_{0};  // the next task index to hand out
};

}  // namespace ferry::offload
