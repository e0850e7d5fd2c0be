// The communicator: collectives and point-to-point messages between the ranks of a job, behind one
// interface. Backends: one rank (no MPI), MPI for host buffers (Open MPI); NCCL for GPU buffers later.
// Every wait has a deadline, so a rank that died or never sends makes the others fail, not hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
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
  std::string launcher = "none";  // "mpirun", "torchrun", "slurm" or "none"
};

// Reads the environment through `lookup` (std::getenv by default); inconsistent values (rank outside
// the world, a non-number) throw std::invalid_argument naming the variable.
using EnvironmentLookup = const char* (*)(const char*);
RankEnvironment detect_rank_environment(EnvironmentLookup lookup = nullptr);

enum class CommDataType : std::uint8_t { f32, f64, i64 };
enum class ReduceOperation : std::uint8_t { sum, max };
std::size_t comm_data_type_size(CommDataType type);  // bytes per element
const char* comm_data_type_name(CommDataType type);  // "f32", "f64", "i64"
const char* reduce_operation_name(ReduceOperation operation);  // "sum", "max"

// A message in flight; wait() blocks until done or the communicator's timeout (CommunicationError).
// Destroying a pending request waits for it (and ends the job when that fails: a destructor cannot
// throw). Requests are used from the communicator's thread and complete before the communicator dies.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual bool test() = 0;  // true once complete
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual std::string backend() const = 0;  // "single", "mpi"
  // The largest message tag point-to-point calls take (MPI_TAG_UB under MPI; at least 32767).
  virtual int max_tag() const = 0;

  // In place over every rank. reduce_scatter: `count` elements per rank, rank r keeps block r of the
  // sum in `output`. all_gather: each rank's `count` elements land at offset rank * count of `output`.
  // Input and output do not overlap, except that all_gather's input may be its own block of `output`.
  virtual void all_reduce(void* data, std::size_t count, CommDataType type, ReduceOperation operation) = 0;
  virtual void reduce_scatter(const void* input, void* output, std::size_t count, CommDataType type) = 0;
  virtual void all_gather(const void* input, void* output, std::size_t count, CommDataType type) = 0;
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
  virtual void barrier() = 0;

  // A timed-out receive is withdrawn and the communicator stays usable; after a timed-out collective or
  // send (MPI cannot withdraw those) every further operation throws and MPI is not finalized.

  // Ends the whole job at once (MPI_Abort): for an error on one rank that the others would wait on.
  [[noreturn]] virtual void abort(int exit_code) = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 private:
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
};

// The timeout every communicator made by make_communicator gets: FERRY_COMM_TIMEOUT_SECONDS (a positive
// integer number of seconds) read through `lookup` (std::getenv by default), 300 s when unset; a bad value
// throws std::invalid_argument naming the variable.
inline constexpr char kCommTimeoutVariable[] = "FERRY_COMM_TIMEOUT_SECONDS";
inline constexpr std::chrono::seconds kDefaultCommTimeout{300};
std::chrono::milliseconds comm_timeout_from_environment(EnvironmentLookup lookup = nullptr);

// One rank: collectives copy or do nothing, a message to oneself is an error.
std::unique_ptr<Communicator> make_single_rank_communicator();

// MPI when the job was launched with more than one rank (mpirun, srun) or `force_mpi`; one rank
// otherwise. Initializes MPI (thread level funneled) and finalizes it when the communicator dies. Every
// call goes from the thread that made it. Its timeout comes from comm_timeout_from_environment().
// Throws CommunicationError when torchrun started it (MPI cannot join a torchrun job: use mpirun or
// srun), or when MPI's rank and size disagree with the launcher's environment.
std::unique_ptr<Communicator> make_communicator(bool force_mpi = false);

}  // namespace ferry
