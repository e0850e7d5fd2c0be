// FERRY_IO_URING_CHECK: runs one liburing call (which returns -errno on failure), retries it while it
// is interrupted by a signal (-EINTR), and turns any other failure into an NvmeError naming the call,
// the source file and line, and the file or directory the store was working on.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "offload/nvme_store.h"

namespace ferry::offload {

template <typename Call>
int check_io_uring_call(Call&& call, const char* call_text, const char* source_file, int source_line,
                        const std::string& context_path) {
  int result = 0;
  do {
    result = call();
  } while (result == -EINTR);
  if (result < 0) {
    throw NvmeError(context_path, 0, -result,
                    std::string("io_uring call `") + call_text + "` failed (" + source_file + ":" +
                        std::to_string(source_line) + "): " + std::strerror(-result));
  }
  return result;
}

}  // namespace ferry::offload

// Evaluates to the call's non-negative result.
#define FERRY_IO_URING_CHECK(call, context_path) \
  ::ferry::offload::check_io_uring_call([&] { return (call); }, #call, __FILE__, __LINE__, (context_path))
