#include "engine/comm/nccl_check.h"

#include "engine/comm/communicator.h"

namespace ferry {
namespace {

const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult";
  }
}

}  // namespace

std::string describe_nccl_error(ncclResult_t result) {
  std::string text = std::string(nccl_result_name(result)) + " (" + std::to_string(static_cast<int>(result)) +
                     "): " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') text += "; NCCL's last error: " + std::string(last);
  return text;
}

void nccl_check(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  throw CommunicationError(std::string("NCCL call `") + call + "` failed (" + file + ":" + std::to_string(line) +
                           "): " + describe_nccl_error(result));
}

void nccl_cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that the next call does not report it again
  throw CommunicationError(std::string("CUDA call `") + call + "` failed (" + file + ":" + std::to_string(line) +
                           "): " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

}  // namespace ferry
