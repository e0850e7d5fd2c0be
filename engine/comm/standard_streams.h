// Flushing every standard stream before the process ends without unwinding (std::_Exit, MPI_Abort):
// what a rank printed about its failure must reach the terminal before the job dies.
#pragma once

#include <cstdio>
#include <iostream>

namespace ferry {

inline void flush_standard_streams() {
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
}

}  // namespace ferry
