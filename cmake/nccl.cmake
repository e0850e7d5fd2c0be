# Optional NCCL (engine/comm's backend for GPU buffers): looked for only in CUDA builds. Finds nccl.h and
# libnccl under NCCL_HOME / NCCL_ROOT (environment or cache), the CUDA toolkit (whose lib/ holds it in
# NVIDIA's images) or the system paths, and needs NCCL 2.10 or newer (ncclAvg, ncclBfloat16). Without it
# the build goes on and make_nccl_communicator() throws. FERRY_HAVE_NCCL tells the rest of the build. The
# library found is not linked: engine/comm loads it at run time (FERRY_NCCL_LIBRARY is its last fallback).
option(FERRY_ENABLE_NCCL "Build the NCCL backend when CUDA and NCCL are found" ON)
set(FERRY_HAVE_NCCL OFF)
set(ferry_nccl_status "not looked for: no CUDA")
if(NOT FERRY_ENABLE_NCCL)
  set(ferry_nccl_status "not looked for: FERRY_ENABLE_NCCL is OFF")
elseif(FERRY_HAVE_CUDA)
  set(ferry_nccl_hints ${NCCL_HOME} ${NCCL_ROOT} $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT})
  find_path(FERRY_NCCL_INCLUDE_DIR nccl.h HINTS ${ferry_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(FERRY_NCCL_LIBRARY nccl HINTS ${ferry_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  if(FERRY_NCCL_INCLUDE_DIR AND FERRY_NCCL_LIBRARY)
    file(STRINGS ${FERRY_NCCL_INCLUDE_DIR}/nccl.h ferry_nccl_version_lines
      REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
    set(ferry_nccl_version "")
    foreach(part MAJOR MINOR PATCH)
      string(REGEX MATCH "NCCL_${part} +([0-9]+)" ignored "${ferry_nccl_version_lines}")
      list(APPEND ferry_nccl_version ${CMAKE_MATCH_1})
    endforeach()
    list(JOIN ferry_nccl_version "." FERRY_NCCL_VERSION)
    if(FERRY_NCCL_VERSION VERSION_LESS 2.10)
      set(ferry_nccl_status "NCCL ${FERRY_NCCL_VERSION} at ${FERRY_NCCL_LIBRARY} is older than 2.10: not used")
    else()
      set(FERRY_HAVE_NCCL ON)
      set(ferry_nccl_status "${FERRY_NCCL_VERSION} (${FERRY_NCCL_LIBRARY})")
    endif()
  else()
    set(ferry_nccl_status "nccl.h or libnccl not found (set NCCL_HOME): the NCCL backend is not built")
  endif()
endif()
message(STATUS "ferry: NCCL ${FERRY_HAVE_NCCL}: ${ferry_nccl_status}")
