// The NCCL backend: the Communicator for buffers in GPU memory, one NCCL communicator per group, its
// collectives on a CUDA stream of its own. Built when CUDA and NCCL (2.10 or newer) are found
// (nccl_backend_built()); otherwise make_nccl_communicator throws. Neither NCCL nor CUDA is included
// here: the CUDA handle types are named by their underlying structs (cudaStream_t is CUstream_st*,
// cudaEvent_t is CUevent_st*).
//
// Making one: every rank of `bootstrap` (an MPI communicator) calls make_nccl_communicator together.
// Rank 0 makes NCCL's unique id and broadcasts it over the bootstrap; every rank then joins with
// ncclCommInitRank. A rank's GPU is `device_ordinal`, or, when that is kChooseDeviceByLocalRank,
// bootstrap.local_rank() modulo the number of visible GPUs. Failures of one rank (no GPU, a bad
// ordinal, no unique id) are shared over the bootstrap before NCCL starts, so every rank throws
// CommunicationError instead of the others hanging in ncclCommInitRank. The caller's current CUDA
// device is left as it was: every call of the communicator sets its own device and sets it back.
//
// What differs from the Communicator contract (communicator.h):
// - Buffers of collectives, send and receive are device memory of device() (then NCCL) or host memory
//   (then the bootstrap, MPI: host scalars such as a gradient norm or overflow flag), by what
//   cudaPointerGetAttributes says of the buffer every rank passes whole (all_reduce's data,
//   reduce_scatter's input, all_gather's output, a message); every rank must pass the same kind.
//   gather_strings and barrier run on the bootstrap (host bytes; a barrier does not wait for the GPU).
// - Ordering with compute: before each operation the communicator's stream waits (on the GPU, without
//   blocking the host) for the work queued so far on the device's legacy default stream, and so on
//   every blocking stream. Work on non-blocking streams (ferry's cuda device uses those) is ordered
//   by the caller: record an event on the compute stream after the producing kernels and call
//   wait_for(event) before starting the collective. Results: request.wait() (the host waits), or
//   record an event on stream() after the call and make the consuming stream wait for it.
// - Requests: each is a CUDA event recorded on stream() after the NCCL call; test() is cudaEventQuery,
//   wait() polls it (and ncclCommGetAsyncError) until timeout(). A timeout or an asynchronous NCCL
//   error aborts the NCCL communicator (ncclCommAbort) and throws CommunicationError naming the
//   operation; from then on every operation of this communicator throws. NCCL cannot withdraw a
//   receive either: a timed-out receive ends the communicator like a collective. A request destroyed
//   while pending waits for it (and ends the job when that fails), unless the communicator was
//   aborted already: its operations ended with it.
// - average is ncclAvg: NCCL divides by size() itself (before or after summing, as its version and
//   algorithm choose), so f32/f64/bf16/f16 results may differ in the last bits from the MPI backend's
//   sum-then-divide; bf16 and f16 are reduced by NCCL's kernels, not by communicator.h's
//   f32-per-combine rule. max is ncclMax, sum ncclSum.
// - reduce_scatter and all_gather with equal counts are ncclReduceScatter / ncclAllGather; with
//   variable counts, one ncclReduce (onto each block's owner) or ncclBroadcast (from each block's
//   owner) per nonempty block, in one ncclGroupStart/End. bytes_sent counts the ring figures of
//   communicator.h whatever NCCL moves (tree or ring).
// - send/receive are ncclSend/ncclRecv of bytes: NCCL has no tags (a tag is checked to lie in
//   [0, max_tag()] and otherwise ignored) and cannot check a message's size, so the two sides must
//   post their messages to each other in the same order with the same sizes. Sends and receives run
//   in order on one stream: two ranks that exchange must not both send first.
// - ncclCommInitRank and ncclCommSplit block the host without a deadline; they start only after
//   every rank has passed a bootstrap collective (which has one), so a missing rank times out there.
// - split(): the bootstrap splits too (the group's host operations run on it), then ncclCommSplit
//   (NCCL 2.18 or newer; older: a new unique id broadcast over the bootstrap's group). The group has
//   its own stream, this one's device and timeout, and counts bytes_sent from zero.
// - abort() aborts NCCL, then the bootstrap (which ends the job).
// - The bootstrap communicator must outlive the NCCL communicator made from it (a group owns its
//   bootstrap's group). Operations go from one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "engine/comm/communicator.h"
#include "engine/core/op_recorder.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace ferry {

// What NcclCommunicator adds to the Communicator: its device, its stream, and ordering after compute.
class NcclCommunicator : public Communicator {
 public:
  virtual int device() const = 0;            // the CUDA device ordinal
  virtual CUstream_st* stream() const = 0;   // the stream every operation runs on
  // The operations started after this call wait (on the GPU) for `event` (a cudaEvent_t recorded on a
  // compute stream of device()). The event may be reused or destroyed afterwards.
  virtual void wait_for(CUevent_st* event) = 0;
  // Every later operation of this communicator (and of groups split from it afterwards) first waits, on
  // the GPU, for the work queued on `compute` so far: a non-blocking compute stream's kernels wrote what
  // a collective reads. Null: only the legacy default stream's work, as before the call.
  virtual void order_after(CUstream_st* compute) = 0;
  // Adds each operation, once complete, to `recorder` (while it is enabled) as an op of kind
  // "communication" on `stream`, from its start on this communicator's stream to its end (timed by CUDA
  // events, put on the steady clock by an event recorded here): the profile's communication track.
  // Null stops it (before the recorder's device goes).
  virtual void record_operations(OpRecorder* recorder, StreamId stream) = 0;
  // split() as NcclCommunicator: split() returns the same object typed as a Communicator.
  virtual std::unique_ptr<NcclCommunicator> split_nccl(int color, int key) = 0;
  std::unique_ptr<Communicator> split(int color, int key) final { return split_nccl(color, key); }
};

// True when this build has the NCCL backend (CUDA and NCCL were found when it was configured).
bool nccl_backend_built();
// Where this process's NCCL comes from, for `ferry --version`: "2.28.9, loaded at run time from PATH",
// why it cannot be loaded, that it is linked in (the CUDA emulation's), or that it is not built.
std::string describe_nccl_library();

inline constexpr int kChooseDeviceByLocalRank = -1;

// Collective over `bootstrap` (see above). The communicator's timeout is the bootstrap's. Throws
// CommunicationError when the build has no NCCL, this process sees no GPU, `device_ordinal` is not a
// visible device, or NCCL fails (naming the call, file and line).
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap,
                                                         int device_ordinal = kChooseDeviceByLocalRank);

}  // namespace ferry
