// How a backend waits between polls of a request: spin for the first millisecond (most messages
// complete within microseconds), then give the core to the other ranks (more ranks than cores is common
// in tests), then sleep, so a long wait costs no CPU. Shared by the MPI and NCCL backends.
#pragma once

#include <chrono>
#include <thread>

namespace ferry {

inline void pause_between_polls(std::chrono::steady_clock::duration waited) {
  if (waited < std::chrono::milliseconds(1)) return;
  if (waited < std::chrono::milliseconds(20)) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(100));
}

}  // namespace ferry
