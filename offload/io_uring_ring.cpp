#include "offload/io_uring_ring.h"

#include <cerrno>
#include <cstring>

#include "offload/nvme_store.h"

namespace ferry::offload {

IoUringRing::IoUringRing(unsigned entries, const std::string& context_path) {
  io_uring_params parameters{};
  parameters.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  int result = io_uring_queue_init_params(entries, &ring_, &parameters);
  if (result == -EINVAL) {  // a kernel older than 6.1 does not know these flags
    parameters = io_uring_params{};
    result = io_uring_queue_init_params(entries, &ring_, &parameters);
  }
  if (result < 0) {
    std::string fix = " (io_uring may be disabled: check /proc/sys/kernel/io_uring_disabled and the container's "
                      "seccomp profile, or use a kernel with io_uring enabled)";
    if (result == -ENOMEM) fix = " (raise the locked-memory limit, ulimit -l, or lower the queue depth)";
    throw NvmeError(context_path, 0, -result,
                    "cannot set up an io_uring ring of " + std::to_string(entries) + " entries: " +
                        std::strerror(-result) + fix);
  }
  setup_flags_ = parameters.flags;
}

IoUringRing::~IoUringRing() { io_uring_queue_exit(&ring_); }

}  // namespace ferry::offload
