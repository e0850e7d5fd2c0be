// The communicator: collectives and point-to-point messages between the ranks of a job or of a group
// of them (split), blocking or asynchronous, behind one interface. Backends: one rank (no MPI), MPI for
// host buffers (Open MPI), a dry run (one process plays one rank, nothing moves); NCCL for GPU buffers
// (nccl_communicator.h, in builds with CUDA and NCCL). Every wait has a deadline, so a rank that died or never sends makes the others fail, not hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry {

// A failed or timed-out communication: names the operation, the peer or group, the tag and the bytes.
class CommunicationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where this process sits in the job, from the launcher's environment: Open MPI (OMPI_COMM_WORLD_*),
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID).
struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;  // ranks on this machine; the world size when the launcher does not say
  std::string launcher = "none";  // "mpirun", "torchrun", "slurm" or "none"
};

// Reads the environment through `lookup` (std::getenv by default); inconsistent values (rank outside
// the world, a non-number) throw std::invalid_argument naming the variable.
using EnvironmentLookup = const char* (*)(const char*);
RankEnvironment detect_rank_environment(EnvironmentLookup lookup = nullptr);

// bf16 and f16 travel as their 2-byte patterns and are reduced in f32: each pairwise combine converts
// both operands to f32, adds (or takes the larger) and rounds the result to nearest, ties to even.
enum class CommDataType : std::uint8_t { f32, f64, i64, bf16, f16 };
// average: the sum, then every rank divides its result by size() once the operation completes (bf16
// and f16: in f32, rounded once; i64: integer division, rounding toward zero).
enum class ReduceOperation : std::uint8_t { sum, max, average };
std::size_t comm_data_type_size(CommDataType type);  // bytes per element
const char* comm_data_type_name(CommDataType type);  // "f32", "f64", "i64", "bf16", "f16"
const char* reduce_operation_name(ReduceOperation operation);  // "sum", "max", "average"

// A message or collective in flight; test() polls once, wait() blocks until done or the communicator's
// timeout (CommunicationError naming the operation). Destroying a pending request waits for it (and
// ends the job when that fails: a destructor cannot throw). Requests are used from the communicator's
// thread and complete before the communicator dies. A request keeps what its operation needs (count
// arrays and the like); the caller keeps the data buffers alive until it completes.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual bool test() = 0;  // true once complete
  virtual void wait() = 0;
};

// One message of an exchange (Communicator::exchange_async): a send of `bytes` from `send_data`, or a
// receive of `bytes` into `receive_data`.
struct PointToPoint {
  enum class Kind : std::uint8_t { send, receive } kind = Kind::send;
  const void* send_data = nullptr;
  void* receive_data = nullptr;
  std::size_t bytes = 0;
  int peer = 0;
  int tag = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual std::string backend() const = 0;  // "single", "mpi", "dry-run", "nccl"
  // The largest message tag point-to-point calls take (MPI_TAG_UB under MPI; at least 32767).
  virtual int max_tag() const = 0;

  // Groups, as MPI_Comm_split: every rank of this communicator calls split; the ranks that pass the same
  // `color` (0 or more) form one group, ranked by `key`, then by their rank here. The group's
  // communicator has this one's timeout and backend, shares its MPI session (MPI is finalized after the
  // last communicator is gone) and counts its own bytes_sent from zero. One rank splits into one rank.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Asynchronous collectives: each returns a request; the buffers stay alive and untouched until it
  // completes. Several may be in flight and be waited for in any order, but every rank must start the
  // same collectives on a communicator in the same order (MPI matches collectives by their order).
  // all_reduce_async: in place over every rank.
  virtual std::unique_ptr<CommRequest> all_reduce_async(void* data, std::size_t count, CommDataType type,
                                                        ReduceOperation operation) = 0;
  // reduce_scatter_async: `counts` has one entry per rank, the same on every rank; `input` holds
  // sum(counts) elements, and rank r receives in `output` the reduction of input elements
  // [sum(counts[0..r)), sum(counts[0..r]) ). Input and output do not overlap.
  virtual std::unique_ptr<CommRequest> reduce_scatter_async(const void* input, void* output,
                                                            std::span<const std::size_t> counts, CommDataType type,
                                                            ReduceOperation operation) = 0;
  // all_gather_async: rank r's counts[r] elements of `input` land at element offset sum(counts[0..r)) of
  // `output` (sum(counts) elements); `input` may be this rank's own block of `output` (in place).
  virtual std::unique_ptr<CommRequest> all_gather_async(const void* input, void* output,
                                                        std::span<const std::size_t> counts, CommDataType type) = 0;

  // Buffers of any size: the MPI backend carries more than its chunk size (1 GiB) as several calls.

  // Blocking forms: start, then wait. Equal counts: reduce_scatter with `count` elements per rank (rank
  // r keeps block r of the reduction), all_gather with each rank's `count` elements at rank * count.
  void all_reduce(void* data, std::size_t count, CommDataType type, ReduceOperation operation) {
    all_reduce_async(data, count, type, operation)->wait();
  }
  void reduce_scatter(const void* input, void* output, std::span<const std::size_t> counts, CommDataType type,
                      ReduceOperation operation) {
    reduce_scatter_async(input, output, counts, type, operation)->wait();
  }
  void all_gather(const void* input, void* output, std::span<const std::size_t> counts, CommDataType type) {
    all_gather_async(input, output, counts, type)->wait();
  }
  void reduce_scatter(const void* input, void* output, std::size_t count, CommDataType type,
                      ReduceOperation operation = ReduceOperation::sum);
  void all_gather(const void* input, void* output, std::size_t count, CommDataType type);

  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // Every rank's bytes at `root` (in rank order); other ranks get an empty vector.
  virtual std::vector<std::string> gather_strings(const std::string& value, int root) = 0;

  // Point to point: messages between a pair of ranks with the same tag arrive in the order sent. The
  // buffer of a send must stay alive until its request completes. A receive takes a message of exactly
  // `bytes`; a longer or shorter one is a CommunicationError naming both sizes.
  virtual std::unique_ptr<CommRequest> send_async(const void* data, std::size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<CommRequest> receive_async(void* data, std::size_t bytes, int peer, int tag) = 0;
  void send(const void* data, std::size_t bytes, int peer, int tag) { send_async(data, bytes, peer, tag)->wait(); }
  void receive(void* data, std::size_t bytes, int peer, int tag) { receive_async(data, bytes, peer, tag)->wait(); }
  // Several messages started together, in order; the request completes once every one has. NCCL starts
  // them as one group, so they progress concurrently (NCCL's sends and receives on one stream otherwise
  // run one after another, and two ranks that send to each other first would wait forever); the others
  // start each with send_async or receive_async.
  virtual std::unique_ptr<CommRequest> exchange_async(std::span<const PointToPoint> messages);
  virtual void barrier() = 0;

  // A timed-out receive is withdrawn and the communicator stays usable; after a timed-out collective or
  // send (MPI cannot withdraw those) every further operation throws and MPI is not finalized.

  // Ends the whole job at once (MPI_Abort): for an error on one rank that the others would wait on.
  [[noreturn]] virtual void abort(int exit_code) = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // The bytes this rank sent through this communicator, by the ring algorithm's figure for each
  // collective, counted when the operation starts (whatever the backend really moves, chunks included):
  //   all_reduce of n bytes over p ranks: floor(2 n (p - 1) / p);
  //   reduce_scatter, all_gather: the bytes of all blocks (sum(counts) elements) minus this rank's own;
  //   broadcast: n at the root, 0 elsewhere; gather_strings: the value's bytes at every rank but the root;
  //   send: its bytes (receive, barrier, split: 0).
  // Zero on one rank: p = 1 sends nothing.
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  // Seconds this communicator's own stream spent in its completed operations (NCCL's: from the start of
  // each operation's calls on the stream to their end, waits for peers included); 0 for backends without
  // one (MPI moves host memory from the calling thread).
  double stream_seconds() const { return stream_seconds_; }

 protected:
  void count_bytes_sent(std::uint64_t bytes) { bytes_sent_ += bytes; }
  void count_stream_seconds(double seconds) { stream_seconds_ += seconds; }

 private:
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
  std::uint64_t bytes_sent_ = 0;
  double stream_seconds_ = 0.0;
};

// The timeout every communicator made by make_communicator gets: FERRY_COMM_TIMEOUT_SECONDS (a positive
// integer number of seconds) read through `lookup` (std::getenv by default), 300 s when unset; a bad value
// throws std::invalid_argument naming the variable.
inline constexpr char kCommTimeoutVariable[] = "FERRY_COMM_TIMEOUT_SECONDS";
inline constexpr std::chrono::seconds kDefaultCommTimeout{300};
std::chrono::milliseconds comm_timeout_from_environment(EnvironmentLookup lookup = nullptr);

// One rank: collectives copy or do nothing, a message to oneself is an error, split gives another one.
std::unique_ptr<Communicator> make_single_rank_communicator();

// A dry run of one rank of a grid in one process: rank() and size() as given (0 <= rank < size, else
// std::invalid_argument; local_rank() = rank), every collective and message completes at once and moves nothing (buffers are
// left untouched), bytes_sent counts as if the data had moved, gather_strings gives the root size()
// strings (its own, the others empty), barrier returns, abort ends the process with the code. split
// throws std::logic_error: build each group's communicator with make_dry_run_communicator.
std::unique_ptr<Communicator> make_dry_run_communicator(int rank, int size);

// MPI when the job was launched with more than one rank (mpirun, srun) or `force_mpi`; one rank
// otherwise. Initializes MPI (thread level funneled) and finalizes it when the communicator dies. Every
// call goes from the thread that made it. Its timeout comes from comm_timeout_from_environment().
// Throws CommunicationError when torchrun started it (MPI cannot join a torchrun job: use mpirun or
// srun), or when MPI's rank and size disagree with the launcher's environment.
std::unique_ptr<Communicator> make_communicator(bool force_mpi = false);

}  // namespace ferry
