// The emulated NCCL (include/nccl.h) over MPI on the emulated device memory, which is host memory: an
// NCCL communicator is an MPI communicator. Every operation is posted as non-blocking MPI calls when it
// is issued (between ncclGroupStart and ncclGroupEnd, all of the group's at ncclGroupEnd, as one
// operation) and completes on its stream when its peers' parts have arrived (nccl_operations.h), so a
// missing peer leaves the stream's events not ready instead of blocking the caller. Reductions of f16
// and bf16 add in f32 in rank order and round once; the others are MPI's. ncclCommInitRank makes
// communicators over MPI_COMM_WORLD (an mpirun job, in the world's rank order); groups come from
// ncclCommSplit, as in ferry.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulation/half_types.h"
#include "nccl_operations.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::shared_ptr<ferry::cuda_emulation::CommState> state = std::make_shared<ferry::cuda_emulation::CommState>();
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

using ferry::cuda_emulation::ByteSpan;
using ferry::cuda_emulation::Posting;
using ferry::cuda_emulation::PostedOperation;

ByteSpan span_of(const void* data, int bytes) { return ByteSpan{static_cast<const std::byte*>(data), static_cast<std::size_t>(bytes)}; }

// A copy of what an operation sends, taken when it is posted (so that in-place operations read their
// input, not their output), kept until it completes.
std::shared_ptr<std::vector<std::byte>> copy_of(const void* send, int bytes) {
  return std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(send), static_cast<const std::byte*>(send) + bytes);
}

// Posts every rank's `count` elements reduced by `op` into `out` (every rank's, or only `root`'s when
// root >= 0); `bytes` is count x the type's size, checked.
ncclResult_t post_reduce(PostedOperation& posted, const void* send, std::byte* out, std::size_t count, int bytes, ncclDataType_t type,
                         ncclRedOp_t op, int root, ncclComm_t comm, const char* call) {
  const auto input = copy_of(send, bytes);
  const bool receives = root < 0 || root == comm->rank;
  const MPI_Datatype mpi = mpi_type(type);
  const int ranks = comm->size;
  if (mpi == MPI_DATATYPE_NULL) {  // 16-bit floats: every rank's values, added here in f32
    auto all = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(bytes) * static_cast<std::size_t>(ranks));
    const int code = MPI_Iallgather(input->data(), bytes, MPI_BYTE, all->data(), bytes, MPI_BYTE, comm->mpi, posted.add_request());
    if (code != MPI_SUCCESS) return mpi_result(code, call);
    posted.then([input, all, count, type, op, ranks, out, receives] {
      if (receives) reduce16(*all, count, type, op, ranks, out);
      return ncclSuccess;
    });
    return ncclSuccess;
  }
  const int elements = static_cast<int>(count);
  const int code = root < 0 ? MPI_Iallreduce(input->data(), out, elements, mpi, mpi_operation(op), comm->mpi, posted.add_request())
                            : MPI_Ireduce(input->data(), receives ? out : nullptr, elements, mpi, mpi_operation(op), root, comm->mpi,
                                          posted.add_request());
  if (code != MPI_SUCCESS) return mpi_result(code, call);
  posted.then([input, out, count, type, op, ranks, receives] {
    if (receives && op == ncclAvg) average(out, count, type, ranks);
    return ncclSuccess;
  });
  return ncclSuccess;
}

// Operations issued inside ncclGroupStart/End, posted together by ncclGroupEnd as one operation.
struct Group {
  int depth = 0;
  cudaStream_t stream = nullptr;
  std::shared_ptr<ferry::cuda_emulation::CommState> state;
  std::vector<Posting> postings;
};
thread_local Group group;

// Posts `posting` now (as an operation of its own on `stream`), or at ncclGroupEnd inside a group.
ncclResult_t post_or_group(ncclComm_t comm, cudaStream_t stream, Posting posting) {
  if (group.depth > 0) {
    if (group.postings.empty()) {
      group.stream = stream;
      group.state = comm->state;
    }
    group.postings.push_back(std::move(posting));
    return ncclSuccess;
  }
  std::vector<Posting> one;
  one.push_back(std::move(posting));
  return ferry::cuda_emulation::issue(stream, comm->state, std::move(one));
}

// A reduction as an operation: its input read, its output (`receive`, where this rank receives) written.
ncclResult_t issue_reduce(const void* send, void* receive, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                          cudaStream_t stream, const char* call) {
  int bytes = 0;
  if (const ncclResult_t result = byte_count(count, type, call, bytes); result != ncclSuccess) return result;
  if (mpi_operation(op) == MPI_OP_NULL) return fail(ncclInvalidArgument, std::string(call) + ": unknown reduction " + std::to_string(static_cast<int>(op)));
  const bool receives = root < 0 || root == comm->rank;
  Posting posting{{span_of(send, bytes)}, {receives ? span_of(receive, bytes) : ByteSpan{}}, {}};
  posting.post = [=](PostedOperation& posted) {
    return post_reduce(posted, send, static_cast<std::byte*>(receive), count, bytes, type, op, root, comm, call);
  };
  return post_or_group(comm, stream, std::move(posting));
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

// Its unfinished operations end unfinished (MPI may still complete them: their buffers are kept).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  ferry::cuda_emulation::abandon_operations(*comm->state);
  return ncclCommDestroy(comm);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (const ncclResult_t result = check_comm(comm, "ncclCommGetAsyncError"); result != ncclSuccess) return result;
  *async_error = comm->state->async_error;  // the first of its operations that failed to complete
  if (*async_error != ncclSuccess) last_error = comm->state->async_error_text;
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
                           ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t result = check_comm(comm, "ncclAllReduce"); result != ncclSuccess) return result;
  return issue_reduce(send, receive, count, type, op, -1, comm, stream, "ncclAllReduce");
}

ncclResult_t ncclReduce(const void* send, void* receive, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t result = check_comm(comm, "ncclReduce"); result != ncclSuccess) return result;
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclReduce: root " + std::to_string(root) + " is not a rank");
  return issue_reduce(send, receive, count, type, op, root, comm, stream, "ncclReduce");
}

ncclResult_t ncclReduceScatter(const void* send, void* receive, std::size_t receive_count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t result = check_comm(comm, "ncclReduceScatter"); result != ncclSuccess) return result;
  // The whole reduction, then this rank's block of it (the emulation trades bytes for simplicity).
  const std::size_t total = receive_count * static_cast<std::size_t>(comm->size);
  int bytes = 0, block = 0;
  if (const ncclResult_t result = byte_count(total, type, "ncclReduceScatter", bytes); result != ncclSuccess) return result;
  if (mpi_operation(op) == MPI_OP_NULL) return fail(ncclInvalidArgument, "ncclReduceScatter: unknown reduction " + std::to_string(static_cast<int>(op)));
  byte_count(receive_count, type, "ncclReduceScatter", block);
  Posting posting{{span_of(send, bytes)}, {span_of(receive, block)}, {}};
  posting.post = [=](PostedOperation& posted) {
    auto reduced = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(bytes));
    const ncclResult_t result = post_reduce(posted, send, reduced->data(), total, bytes, type, op, -1, comm, "ncclReduceScatter");
    if (result != ncclSuccess) return result;
    const std::size_t offset = static_cast<std::size_t>(comm->rank) * static_cast<std::size_t>(block);
    posted.then([reduced, receive, offset, block] {
      std::memcpy(receive, reduced->data() + offset, static_cast<std::size_t>(block));
      return ncclSuccess;
    });
    return ncclSuccess;
  };
  return post_or_group(comm, stream, std::move(posting));
}

ncclResult_t ncclAllGather(const void* send, void* receive, std::size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  if (const ncclResult_t result = check_comm(comm, "ncclAllGather"); result != ncclSuccess) return result;
  int bytes = 0;
  if (const ncclResult_t result = byte_count(send_count, type, "ncclAllGather", bytes); result != ncclSuccess) return result;
  Posting posting{{span_of(send, bytes)}, {ByteSpan{static_cast<const std::byte*>(receive), static_cast<std::size_t>(bytes) * static_cast<std::size_t>(comm->size)}}, {}};
  posting.post = [=](PostedOperation& posted) {
    const auto input = copy_of(send, bytes);
    posted.then([input] { return ncclSuccess; });  // kept until MPI is done with it
    return mpi_result(MPI_Iallgather(input->data(), bytes, MPI_BYTE, receive, bytes, MPI_BYTE, comm->mpi, posted.add_request()), "MPI_Iallgather");
  };
  return post_or_group(comm, stream, std::move(posting));
}

ncclResult_t ncclBroadcast(const void* send, void* receive, std::size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t result = check_comm(comm, "ncclBroadcast"); result != ncclSuccess) return result;
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " is not a rank");
  int bytes = 0;
  if (const ncclResult_t result = byte_count(count, type, "ncclBroadcast", bytes); result != ncclSuccess) return result;
  const bool sends = comm->rank == root;
  Posting posting{{sends ? span_of(send, bytes) : ByteSpan{}}, {span_of(receive, bytes)}, {}};
  posting.post = [=](PostedOperation& posted) {
    if (sends && send != receive) std::memmove(receive, send, static_cast<std::size_t>(bytes));
    return mpi_result(MPI_Ibcast(receive, bytes, MPI_BYTE, root, comm->mpi, posted.add_request()), "MPI_Ibcast");
  };
  return post_or_group(comm, stream, std::move(posting));
}

ncclResult_t ncclSend(const void* send, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t result = check_comm(comm, "ncclSend"); result != ncclSuccess) return result;
  int bytes = 0;
  if (const ncclResult_t result = byte_count(count, type, "ncclSend", bytes); result != ncclSuccess) return result;
  if (peer < 0 || peer >= comm->size) return fail(ncclInvalidArgument, "ncclSend: peer " + std::to_string(peer) + " is not a rank");
  Posting posting{{span_of(send, bytes)}, {}, {}};
  // Complete once the peer's receive has taken it (MPI's synchronous mode), as NCCL's send, whose kernel
  // waits for the receiving one: two ranks that send to each other before receiving wait forever
  // unless their calls are in one group.
  posting.post = [=](PostedOperation& posted) {
    return mpi_result(MPI_Issend(send, bytes, MPI_BYTE, peer, 0, comm->mpi, posted.add_request()), "MPI_Issend");
  };
  return post_or_group(comm, stream, std::move(posting));
}

ncclResult_t ncclRecv(void* receive, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t result = check_comm(comm, "ncclRecv"); result != ncclSuccess) return result;
  int bytes = 0;
  if (const ncclResult_t result = byte_count(count, type, "ncclRecv", bytes); result != ncclSuccess) return result;
  if (peer < 0 || peer >= comm->size) return fail(ncclInvalidArgument, "ncclRecv: peer " + std::to_string(peer) + " is not a rank");
  Posting posting{{}, {span_of(receive, bytes)}, {}};
  posting.post = [=](PostedOperation& posted) {
    return mpi_result(MPI_Irecv(receive, bytes, MPI_BYTE, peer, 0, comm->mpi, posted.add_request()), "MPI_Irecv");
  };
  return post_or_group(comm, stream, std::move(posting));
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
  if (issued.postings.empty()) return ncclSuccess;
  return ferry::cuda_emulation::issue(issued.stream, issued.state, std::move(issued.postings));
}

}  // extern "C"
