// Destructors never throw: cleanup that can fail (a free the allocator refuses, a driver error at
// teardown) runs through run_cleanup, which writes the failure to stderr with what was being cleaned
// up and goes on, instead of ending the process through std::terminate.
#pragma once

#include <cstdio>
#include <exception>

namespace ferry {

template <typename Cleanup>
void run_cleanup(const char* what, Cleanup&& cleanup) noexcept {
  try {
    cleanup();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry: error while %s (ignored in a destructor): %s\n", what, error.what());
  } catch (...) {
    std::fprintf(stderr, "ferry: unknown error while %s (ignored in a destructor)\n", what);
  }
}

}  // namespace ferry
