# Optional CUDA: when nvcc is found the cuda device is built (sm_90 code plus PTX for other GPUs);
# otherwise the build is CPU-only. FERRY_HAVE_CUDA tells the rest of the build which it is.
set(FERRY_HAVE_CUDA OFF)
if(FERRY_ENABLE_CUDA AND NOT FERRY_SANITIZE)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # "90" = sm_90 machine code plus compute_90 PTX
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's flag for C++20: name it, then ask for it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    find_package(CUDAToolkit REQUIRED)
    set(FERRY_HAVE_CUDA ON)
  endif()
endif()
message(STATUS "ferry: CUDA ${FERRY_HAVE_CUDA}")

# NCCL, for the GPU collectives, needs CUDA: looked for here, after it.
include(${CMAKE_CURRENT_LIST_DIR}/nccl.cmake)
