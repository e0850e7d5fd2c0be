// IoUringRing: owns one io_uring instance (liburing) and tears it down when destroyed. It asks for a
// single-issuer ring with deferred task work (the store is driven by one thread) and falls back to a
// plain ring when the kernel refuses those flags.
#pragma once

#include <liburing.h>

#include <string>

namespace ferry::offload {

class IoUringRing {
 public:
  // Throws NvmeError (naming `context_path` and the fix) when io_uring cannot be set up at all.
  IoUringRing(unsigned entries, const std::string& context_path);
  ~IoUringRing();
  IoUringRing(const IoUringRing&) = delete;
  IoUringRing& operator=(const IoUringRing&) = delete;

  io_uring* get() { return &ring_; }
  // The setup flags the kernel accepted (0 after the fallback).
  unsigned setup_flags() const { return setup_flags_; }
  // Whether completions are posted only when this thread enters the kernel (IORING_SETUP_DEFER_TASKRUN).
  bool defers_task_work() const { return (setup_flags_ & IORING_SETUP_DEFER_TASKRUN) != 0; }

 private:
  io_uring ring_{};
  unsigned setup_flags_ = 0;
};

}  // namespace ferry::offload
