// The emulated NCCL (include/nccl.h) over MPI on the emulated device memory, which is host memory: an
// NCCL communicator is an MPI communicator, and every operation runs when it is issued (the emulated
// streams complete their work at once), except between ncclGroupStart and ncclGroupEnd, where operations
// wait for ncclGroupEnd: its sends and receives are posted together (so a group may both send and
// receive), its collectives then run in the order issued. Reductions of f16 and bf16 add in f32 in rank
// order and round once; the others are MPI's. ncclCommInitRank makes communicators over MPI_COMM_WORLD
// (an mpirun job, in the world's rank order); groups come from ncclCommSplit, as in ferry.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulation/half_types.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

namespace {

thread_local std::string last_error;

ncclResult_t fail(ncclResult_t result, const std::string& text) {
  last_error = "NCCL emulation: " + text;
  return result;
}

ncclResult_t mpi_result(int code, const char* call) {
  if (code == MPI_SUCCESS) return ncclSuccess;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return fail(ncclSystemError, std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

std::size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

// MPI's type for a reduction, or MPI_DATATYPE_NULL for the 16-bit floats (reduced here).
MPI_Datatype mpi_type(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclFloat16: case ncclBfloat16: return MPI_DATATYPE_NULL;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_operation(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: case ncclAvg: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

float load16(const std::byte* bytes, ncclDataType_t type) {
  std::uint16_t bits = 0;
  std::memcpy(&bits, bytes, sizeof bits);
  return type == ncclBfloat16 ? __bfloat162float(__nv_bfloat16{bits}) : __half2float(__ushort_as_half(bits));
}

void store16(std::byte* bytes, float value, ncclDataType_t type) {
  const std::uint16_t bits = type == ncclBfloat16 ? __float2bfloat16(value).__x : __half_as_ushort(__float2half(value));
  std::memcpy(bytes, &bits, sizeof bits);
}

template <typename T>
void divide(std::byte* data, std::size_t count, int ranks) {
  for (std::size_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, data + i * sizeof(T), sizeof(T));
    value = static_cast<T>(value / static_cast<T>(ranks));
    std::memcpy(data + i * sizeof(T), &value, sizeof(T));
  }
}

// ncclAvg: the sum divided by the ranks, in the type (integers divide as integers).
void average(std::byte* data, std::size_t count, ncclDataType_t type, int ranks) {
  switch (type) {
    case ncclInt8: divide<std::int8_t>(data, count, ranks); break;
    case ncclUint8: divide<std::uint8_t>(data, count, ranks); break;
    case ncclInt32: divide<std::int32_t>(data, count, ranks); break;
    case ncclUint32: divide<std::uint32_t>(data, count, ranks); break;
    case ncclInt64: divide<std::int64_t>(data, count, ranks); break;
    case ncclUint64: divide<std::uint64_t>(data, count, ranks); break;
    case ncclFloat32: divide<float>(data, count, ranks); break;
    case ncclFloat64: divide<double>(data, count, ranks); break;
    case ncclFloat16: case ncclBfloat16: break;  // averaged in f32 by reduce16
  }
}

// Every rank's `count` 16-bit values (all of them, rank after rank) reduced in f32 in rank order.
void reduce16(const std::vector<std::byte>& all, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int ranks,
              std::byte* out) {
  for (std::size_t i = 0; i < count; ++i) {
    float value = load16(all.data() + i * 2, type);
    for (int r = 1; r < ranks; ++r) {
      const float next = load16(all.data() + (static_cast<std::size_t>(r) * count + i) * 2, type);
      switch (op) {
        case ncclSum: case ncclAvg: value += next; break;
        case ncclProd: value *= next; break;
        case ncclMax: value = std::max(value, next); break;
        case ncclMin: value = std::min(value, next); break;
      }
    }
    if (op == ncclAvg) value /= static_cast<float>(ranks);
    store16(out + i * 2, value, type);
  }
}

ncclResult_t check_comm(ncclComm_t comm, const char* call) {
  if (comm == nullptr || comm->mpi == MPI_COMM_NULL) return fail(ncclInvalidArgument, std::string(call) + ": no communicator");
  return ncclSuccess;
}

// count x type as bytes that one MPI call can take.
ncclResult_t byte_count(std::size_t count, ncclDataType_t type, const char* call, int& bytes) {
  const std::size_t size = type_size(type);
  if (size == 0) return fail(ncclInvalidArgument, std::string(call) + ": unknown data type " + std::to_string(static_cast<int>(type)));
  if (count > static_cast<std::size_t>(INT_MAX) / size) {
    return fail(ncclInvalidArgument, std::string(call) + ": " + std::to_string(count) + " elements exceed one MPI call of the emulation");
  }
  bytes = static_cast<int>(count * size);
  return ncclSuccess;
}

// Every rank's `count` elements reduced by `op` into `out` (every rank's, or only `root`'s when root >= 0).
ncclResult_t reduce(const void* send, std::byte* out, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                    ncclComm_t comm, const char* call) {
  int bytes = 0;
  if (const ncclResult_t result = byte_count(count, type, call, bytes); result != ncclSuccess) return result;
  if (mpi_operation(op) == MPI_OP_NULL) return fail(ncclInvalidArgument, std::string(call) + ": unknown reduction " + std::to_string(static_cast<int>(op)));
  const std::vector<std::byte> input(static_cast<const std::byte*>(send), static_cast<const std::byte*>(send) + bytes);
  const bool receives = root < 0 || root == comm->rank;
  const MPI_Datatype mpi = mpi_type(type);
  if (mpi == MPI_DATATYPE_NULL) {
    std::vector<std::byte> all(static_cast<std::size_t>(bytes) * static_cast<std::size_t>(comm->size));
    const int code = MPI_Allgather(input.data(), bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, comm->mpi);
    if (code != MPI_SUCCESS) return mpi_result(code, call);
    if (receives) reduce16(all, count, type, op, comm->size, out);
    return ncclSuccess;
  }
  const int elements = static_cast<int>(count);
  const int code = root < 0 ? MPI_Allreduce(input.data(), out, elements, mpi, mpi_operation(op), comm->mpi)
                            : MPI_Reduce(input.data(), receives ? out : nullptr, elements, mpi, mpi_operation(op), root, comm->mpi);
  if (code != MPI_SUCCESS) return mpi_result(code, call);
  if (receives && op == ncclAvg) average(out, count, type, comm->size);
  return ncclSuccess;
}

// Operations issued inside ncclGroupStart/End, run by ncclGroupEnd.
struct Group {
  int depth = 0;
  std::vector<std::function<ncclResult_t(std::vector<MPI_Request>&)>> messages;  // post a send or receive
  std::vector<std::function<ncclResult_t()>> collectives;
};
thread_local Group group;

ncclResult_t run_or_queue(std::function<ncclResult_t()> collective) {
  if (group.depth > 0) {
    group.collectives.push_back(std::move(collective));
    return ncclSuccess;
  }
  return collective();
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: no id");
  static std::atomic<std::uint64_t> made{0};
  std::random_device entropy;
  const std::uint64_t words[4] = {static_cast<std::uint64_t>(::getpid()), made.fetch_add(1), entropy(), entropy()};
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, words, sizeof words);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int ranks, ncclUniqueId id, int rank) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRank: no communicator to fill");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) return fail(ncclInvalidUsage, "ncclCommInitRank: MPI is not initialized (the emulation runs over MPI)");
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (ranks != world_size || rank < 0 || rank >= ranks) {
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                                      ": the emulation makes communicators over all " + std::to_string(world_size) +
                                      " ranks of MPI_COMM_WORLD only (make groups with ncclCommSplit)");
  }
  MPI_Comm mpi = MPI_COMM_NULL;
  if (const int code = MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &mpi); code != MPI_SUCCESS) return mpi_result(code, "MPI_Comm_split");
  MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
  // Every rank must have been given the same id.
  ncclUniqueId low = id, high = id;
  MPI_Allreduce(MPI_IN_PLACE, low.internal, sizeof low.internal, MPI_BYTE, MPI_BAND, mpi);
  MPI_Allreduce(MPI_IN_PLACE, high.internal, sizeof high.internal, MPI_BYTE, MPI_BOR, mpi);
  if (std::memcmp(low.internal, high.internal, sizeof low.internal) != 0) {
    MPI_Comm_free(&mpi);
    return fail(ncclInvalidUsage, "ncclCommInitRank: the ranks were given different unique ids");
  }
  *comm = new ncclComm{mpi, rank, ranks};
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* new_comm, ncclConfig_t* config) {
  if (const ncclResult_t result = check_comm(comm, "ncclCommSplit"); result != ncclSuccess) return result;
  if (new_comm == nullptr) return fail(ncclInvalidArgument, "ncclCommSplit: no communicator to fill");
  if (config != nullptr && config->blocking == 0) return fail(ncclInvalidArgument, "ncclCommSplit: the emulation has no non-blocking communicators");
  MPI_Comm mpi = MPI_COMM_NULL;
  const int code = MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mpi);
  if (code != MPI_SUCCESS) return mpi_result(code, "MPI_Comm_split");
  if (mpi == MPI_COMM_NULL) {
    *new_comm = nullptr;
    return ncclSuccess;
  }
  MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
  auto* made = new ncclComm{mpi, 0, 1};
  MPI_Comm_rank(mpi, &made->rank);
  MPI_Comm_size(mpi, &made->size);
  *new_comm = made;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (const ncclResult_t result = check_comm(comm, "ncclCommGetAsyncError"); result != ncclSuccess) return result;
  *async_error = ncclSuccess;  // every operation finished (or failed) when it was issued
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (const ncclResult_t result = check_comm(comm, "ncclCommCount"); result != ncclSuccess) return result;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (const ncclResult_t result = check_comm(comm, "ncclCommUserRank"); result != ncclSuccess) return result;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* receive, std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t result = check_comm(comm, "ncclAllReduce"); result != ncclSuccess) return result;
  return run_or_queue([=] { return reduce(send, static_cast<std::byte*>(receive), count, type, op, -1, comm, "ncclAllReduce"); });
}

ncclResult_t ncclReduce(const void* send, void* receive, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t result = check_comm(comm, "ncclReduce"); result != ncclSuccess) return result;
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclReduce: root " + std::to_string(root) + " is not a rank");
  return run_or_queue([=] { return reduce(send, static_cast<std::byte*>(receive), count, type, op, root, comm, "ncclReduce"); });
}

ncclResult_t ncclReduceScatter(const void* send, void* receive, std::size_t receive_count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t result = check_comm(comm, "ncclReduceScatter"); result != ncclSuccess) return result;
  return run_or_queue([=] {
    // The whole reduction, then this rank's block of it (the emulation trades bytes for simplicity).
    const std::size_t total = receive_count * static_cast<std::size_t>(comm->size);
    std::vector<std::byte> reduced(total * type_size(type));
    const ncclResult_t result = reduce(send, reduced.data(), total, type, op, -1, comm, "ncclReduceScatter");
    if (result != ncclSuccess) return result;
    const std::size_t block = receive_count * type_size(type);
    std::memcpy(receive, reduced.data() + static_cast<std::size_t>(comm->rank) * block, block);
    return ncclSuccess;
  });
}

ncclResult_t ncclAllGather(const void* send, void* receive, std::size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
  if (const ncclResult_t result = check_comm(comm, "ncclAllGather"); result != ncclSuccess) return result;
  return run_or_queue([=] {
    int bytes = 0;
    if (const ncclResult_t result = byte_count(send_count, type, "ncclAllGather", bytes); result != ncclSuccess) return result;
    const std::vector<std::byte> input(static_cast<const std::byte*>(send), static_cast<const std::byte*>(send) + bytes);
    return mpi_result(MPI_Allgather(input.data(), bytes, MPI_BYTE, receive, bytes, MPI_BYTE, comm->mpi), "MPI_Allgather");
  });
}

ncclResult_t ncclBroadcast(const void* send, void* receive, std::size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t result = check_comm(comm, "ncclBroadcast"); result != ncclSuccess) return result;
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " is not a rank");
  return run_or_queue([=] {
    int bytes = 0;
    if (const ncclResult_t result = byte_count(count, type, "ncclBroadcast", bytes); result != ncclSuccess) return result;
    if (comm->rank == root && send != receive) std::memmove(receive, send, static_cast<std::size_t>(bytes));
    return mpi_result(MPI_Bcast(receive, bytes, MPI_BYTE, root, comm->mpi), "MPI_Bcast");
  });
}

ncclResult_t ncclSend(const void* send, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t result = check_comm(comm, "ncclSend"); result != ncclSuccess) return result;
  int bytes = 0;
  if (const ncclResult_t result = byte_count(count, type, "ncclSend", bytes); result != ncclSuccess) return result;
  if (peer < 0 || peer >= comm->size) return fail(ncclInvalidArgument, "ncclSend: peer " + std::to_string(peer) + " is not a rank");
  if (group.depth == 0) return mpi_result(MPI_Send(send, bytes, MPI_BYTE, peer, 0, comm->mpi), "MPI_Send");
  group.messages.push_back([=](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    return mpi_result(MPI_Isend(send, bytes, MPI_BYTE, peer, 0, comm->mpi, &requests.back()), "MPI_Isend");
  });
  return ncclSuccess;
}

ncclResult_t ncclRecv(void* receive, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t result = check_comm(comm, "ncclRecv"); result != ncclSuccess) return result;
  int bytes = 0;
  if (const ncclResult_t result = byte_count(count, type, "ncclRecv", bytes); result != ncclSuccess) return result;
  if (peer < 0 || peer >= comm->size) return fail(ncclInvalidArgument, "ncclRecv: peer " + std::to_string(peer) + " is not a rank");
  if (group.depth == 0) return mpi_result(MPI_Recv(receive, bytes, MPI_BYTE, peer, 0, comm->mpi, MPI_STATUS_IGNORE), "MPI_Recv");
  group.messages.push_back([=](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    return mpi_result(MPI_Irecv(receive, bytes, MPI_BYTE, peer, 0, comm->mpi, &requests.back()), "MPI_Irecv");
  });
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group.depth > 0) return ncclSuccess;
  Group issued = std::move(group);
  group = Group{};
  ncclResult_t result = ncclSuccess;
  std::vector<MPI_Request> requests;
  requests.reserve(issued.messages.size());
  for (const auto& post : issued.messages) {
    if (result == ncclSuccess) result = post(requests);
  }
  for (const auto& collective : issued.collectives) {
    if (result == ncclSuccess) result = collective();
  }
  if (!requests.empty()) {
    const ncclResult_t waited = mpi_result(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    if (result == ncclSuccess) result = waited;
  }
  return result;
}

}  // extern "C"
