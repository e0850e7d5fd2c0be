// NCCL loaded with dlopen (nccl_loader.h): the table of the functions ferry calls, resolved once, and
// each function defined with NCCL's own signature from nccl.h, forwarding to the table.
#include "engine/comm/nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/nccl_check.h"
#include "engine/comm/nccl_communicator.h"

namespace ferry {
namespace {

#define FERRY_NCCL_FUNCTIONS(X)                                                                                  \
  X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId) X(ncclCommInitRank)             \
  X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclCommCount) X(ncclCommUserRank)              \
  X(ncclAllReduce) X(ncclReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast) X(ncclSend) X(ncclRecv) \
  X(ncclGroupStart) X(ncclGroupEnd) FERRY_NCCL_SPLIT(X)
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define FERRY_NCCL_SPLIT(X) X(ncclCommSplit)
#else
#define FERRY_NCCL_SPLIT(X)
#endif

struct NcclFunctions {
#define FERRY_NCCL_POINTER(name) decltype(&::name) name = nullptr;
  FERRY_NCCL_FUNCTIONS(FERRY_NCCL_POINTER)
#undef FERRY_NCCL_POINTER
};

struct LoadedNccl {
  void* handle = nullptr;
  std::string path;
  int version = 0;
  NcclFunctions functions;
  std::string failure;  // empty when loaded
};

std::string version_text(int code) {
  // NCCL's codes: major * 10000 + minor * 100 + patch from 2.9 on (1000 * major + 100 * minor + patch before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

LoadedNccl open_nccl() {
  LoadedNccl loaded;
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("FERRY_NCCL_LIBRARY"); chosen != nullptr && *chosen != '\0') {
    candidates.push_back(chosen);  // the user's choice alone: no silent fallback to another library
  } else {
    candidates = {"libnccl.so.2", FERRY_NCCL_BUILD_LIBRARY};
  }
  std::string tried;
  for (const std::string& candidate : candidates) {
    loaded.handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (loaded.handle != nullptr) {
      loaded.path = candidate;
      break;
    }
    const char* why = dlerror();  // names the file itself
    tried += (tried.empty() ? "" : "; ") + (why != nullptr ? std::string(why) : candidate + ": not loadable");
  }
  if (loaded.handle == nullptr) {
    loaded.failure = "NCCL could not be loaded (" + tried +
                     "): install NCCL 2.10 or newer (libnccl2) or set FERRY_NCCL_LIBRARY to its libnccl.so.2; "
                     "--device cuda needs it with more than one rank";
    return loaded;
  }
  if (Dl_info info{}; dladdr(dlsym(loaded.handle, "ncclGetVersion"), &info) != 0 && info.dli_fname != nullptr) {
    loaded.path = info.dli_fname;
  }
  std::string missing;
#define FERRY_NCCL_RESOLVE(name)                                                       \
  loaded.functions.name = reinterpret_cast<decltype(&::name)>(dlsym(loaded.handle, #name)); \
  if (loaded.functions.name == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  FERRY_NCCL_FUNCTIONS(FERRY_NCCL_RESOLVE)
#undef FERRY_NCCL_RESOLVE
  if (loaded.functions.ncclGetVersion != nullptr) loaded.functions.ncclGetVersion(&loaded.version);
  const std::string needed = version_text(NCCL_VERSION_CODE);
  if (!missing.empty()) {
    loaded.failure = loaded.path + " lacks " + missing + ": ferry was built against NCCL " + needed +
                     "'s headers; install that NCCL or newer, or set FERRY_NCCL_LIBRARY to one";
  } else if (loaded.version < NCCL_VERSION(2, 10, 0) ||
             (NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0) && loaded.version < NCCL_VERSION(2, 18, 0))) {
    loaded.failure = loaded.path + " is NCCL " + version_text(loaded.version) + ", older than ferry needs (" +
                     (NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0) ? "2.18, for ncclCommSplit" : "2.10") +
                     "): install a newer NCCL or set FERRY_NCCL_LIBRARY to one";
  }
  return loaded;
}

// Loaded once per process and never changed after (a library is process-wide by nature).
const LoadedNccl& loaded_nccl() {
  static const LoadedNccl loaded = open_nccl();
  return loaded;
}

const NcclFunctions* usable() {
  const LoadedNccl& loaded = loaded_nccl();
  return loaded.failure.empty() ? &loaded.functions : nullptr;
}

}  // namespace

void load_nccl_library() {
  if (const std::string& failure = loaded_nccl().failure; !failure.empty()) throw CommunicationError(failure);
}

std::string describe_nccl_library() {
  const LoadedNccl& loaded = loaded_nccl();
  if (!loaded.failure.empty()) return "not loadable: " + loaded.failure;
  return version_text(loaded.version) + ", loaded at run time from " + loaded.path;
}

}  // namespace ferry

// NCCL's API, each call forwarded to the loaded library; ncclSystemError when it did not load (the
// backend calls load_nccl_library() first, which says why).
extern "C" {

#define FERRY_NCCL_FORWARD(name, parameters, arguments)      \
  ncclResult_t name parameters {                              \
    const ferry::NcclFunctions* functions = ferry::usable(); \
    return functions != nullptr ? functions->name arguments : ncclSystemError; \
  }

FERRY_NCCL_FORWARD(ncclGetVersion, (int* version), (version))
FERRY_NCCL_FORWARD(ncclGetUniqueId, (ncclUniqueId * id), (id))
FERRY_NCCL_FORWARD(ncclCommInitRank, (ncclComm_t * comm, int ranks, ncclUniqueId id, int rank), (comm, ranks, id, rank))
FERRY_NCCL_FORWARD(ncclCommDestroy, (ncclComm_t comm), (comm))
FERRY_NCCL_FORWARD(ncclCommAbort, (ncclComm_t comm), (comm))
FERRY_NCCL_FORWARD(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error), (comm, error))
FERRY_NCCL_FORWARD(ncclCommCount, (const ncclComm_t comm, int* count), (comm, count))
FERRY_NCCL_FORWARD(ncclCommUserRank, (const ncclComm_t comm, int* rank), (comm, rank))
FERRY_NCCL_FORWARD(ncclAllReduce,
                   (const void* send, void* receive, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                   (send, receive, count, type, op, comm, stream))
FERRY_NCCL_FORWARD(ncclReduce,
                   (const void* send, void* receive, size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                    cudaStream_t stream),
                   (send, receive, count, type, op, root, comm, stream))
FERRY_NCCL_FORWARD(ncclReduceScatter,
                   (const void* send, void* receive, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                   (send, receive, count, type, op, comm, stream))
FERRY_NCCL_FORWARD(ncclAllGather, (const void* send, void* receive, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream),
                   (send, receive, count, type, comm, stream))
FERRY_NCCL_FORWARD(ncclBroadcast,
                   (const void* send, void* receive, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream),
                   (send, receive, count, type, root, comm, stream))
FERRY_NCCL_FORWARD(ncclSend, (const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream),
                   (send, count, type, peer, comm, stream))
FERRY_NCCL_FORWARD(ncclRecv, (void* receive, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream),
                   (receive, count, type, peer, comm, stream))
FERRY_NCCL_FORWARD(ncclGroupStart, (), ())
FERRY_NCCL_FORWARD(ncclGroupEnd, (), ())
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
FERRY_NCCL_FORWARD(ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* split, ncclConfig_t* config),
                   (comm, color, key, split, config))
#endif
#undef FERRY_NCCL_FORWARD

const char* ncclGetErrorString(ncclResult_t result) {
  const ferry::NcclFunctions* functions = ferry::usable();
  return functions != nullptr ? functions->ncclGetErrorString(result) : "NCCL is not loaded";
}

const char* ncclGetLastError(ncclComm_t comm) {
  const ferry::NcclFunctions* functions = ferry::usable();
  return functions != nullptr ? functions->ncclGetLastError(comm) : "NCCL is not loaded";
}

}  // extern "C"
