// FERRY_NCCL_CHECK and FERRY_NCCL_CUDA_CHECK: run one NCCL or CUDA runtime call and turn a failure into
// a CommunicationError naming the call, the source file and line, and NCCL's or CUDA's own words for
// the error (with NCCL's last error message when it has one). Private to engine/comm, like every header
// that includes nccl.h; built only with NCCL.
#pragma once

#include <cuda_bf16.h>  // before nccl.h: NCCL before 2.19 declares ncclBfloat16 only when it is seen
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace ferry {

// "ncclUnhandledCudaError (1): unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
std::string describe_nccl_error(ncclResult_t result);

void nccl_check(ncclResult_t result, const char* call, const char* file, int line);
void nccl_cuda_check(cudaError_t status, const char* call, const char* file, int line);

}  // namespace ferry

#define FERRY_NCCL_CHECK(call) ::ferry::nccl_check((call), #call, __FILE__, __LINE__)
#define FERRY_NCCL_CUDA_CHECK(call) ::ferry::nccl_cuda_check((call), #call, __FILE__, __LINE__)
