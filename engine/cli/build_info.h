// What `ferry --version` says: the version, the commit the binary was built from (written at build
// time by cmake/build_info.cmake), whether the cuda device is built in, and the host kernels chosen on
// this machine (OpenBLAS's GEMM core, CpuAdam's SIMD level).
#pragma once

#include <string>

namespace ferry {

const char* build_commit();
std::string version_text();

}  // namespace ferry
