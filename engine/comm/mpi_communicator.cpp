// MpiCommunicator's lifetime and the guards every operation passes: MPI started (or joined), a
// private duplicate of MPI_COMM_WORLD that returns errors instead of killing the process, MPI's view
// of the world checked against the launcher's, and the end of the job (MPI_Abort).
#include <climits>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "engine/comm/mpi_check.h"
#include "engine/comm/mpi_communicator_impl.h"
#include "engine/comm/standard_streams.h"

namespace ferry {
namespace {

// The rank among the processes that share this node's memory: the local rank when no launcher said.
int shared_memory_rank(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  FERRY_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_rank = 0;
  const int error_code = MPI_Comm_rank(node, &node_rank);
  MPI_Comm_free(&node);
  FERRY_MPI_CHECK(error_code);
  return node_rank;
}

}  // namespace

MpiCommunicator::MpiCommunicator(const RankEnvironment& environment, const MpiCommunicatorOptions& options)
    : context_(std::make_shared<MpiContext>(environment)),
      max_chunk_bytes_(options.max_message_chunk_bytes),
      owner_thread_(std::this_thread::get_id()) {
  FERRY_MPI_CHECK(MPI_Comm_rank(context_->world, &rank_));
  FERRY_MPI_CHECK(MPI_Comm_size(context_->world, &size_));
  if (environment.launcher != "none" && (rank_ != environment.rank || size_ != environment.world_size)) {
    throw CommunicationError("MPI says this is rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                             " but the " + environment.launcher + " environment says rank " +
                             std::to_string(environment.rank) + " of " + std::to_string(environment.world_size) +
                             ": start every rank through the launcher (mpirun -np N, srun or torchrun), not by hand inside "
                             "its allocation");
  }
  world_ranks_.resize(static_cast<std::size_t>(size_));
  for (int rank = 0; rank < size_; ++rank) world_ranks_[static_cast<std::size_t>(rank)] = rank;
  FERRY_MPI_CHECK(MPI_Comm_dup(context_->world, &comm_));
  try {
    FERRY_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    int* tag_upper_bound = nullptr;
    int has_tag_upper_bound = 0;
    FERRY_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_upper_bound, &has_tag_upper_bound));
    if (has_tag_upper_bound != 0) tag_upper_bound_ = *tag_upper_bound;
    local_rank_ = environment.launcher != "none" ? environment.local_rank : shared_memory_rank(comm_);
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiCommunicator::MpiCommunicator(const MpiCommunicator& parent, MPI_Comm group, std::vector<int> world_ranks)
    : context_(parent.context_),
      comm_(group),
      size_(static_cast<int>(world_ranks.size())),
      local_rank_(parent.local_rank_),
      tag_upper_bound_(parent.tag_upper_bound_),
      is_world_(false),
      world_ranks_(std::move(world_ranks)),
      max_chunk_bytes_(parent.max_chunk_bytes_),
      owner_thread_(std::this_thread::get_id()) {
  set_timeout(parent.timeout());
  try {
    FERRY_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    FERRY_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    int mpi_size = 0;
    FERRY_MPI_CHECK(MPI_Comm_size(comm_, &mpi_size));
    if (mpi_size != size_) {
      throw CommunicationError(self_text() + ": MPI_Comm_split made a group of " + std::to_string(mpi_size) +
                               " ranks where the colors and keys call for " + std::to_string(size_));
    }
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiCommunicator::~MpiCommunicator() {
  if (!failed_operations_.empty()) {
    // Freeing the communicator or finalizing MPI could wait forever on the peer that never came.
    const char* left_behind = context_->session.initialized_here()
                                  ? "neither frees its MPI communicator nor finalizes MPI"
                                  : "does not free its MPI communicator";
    std::cerr << "ferry: " + self_text() + " " + left_behind + ": " + failed_operations_.front().description() +
                     " never completed\n";
    context_->session.skip_finalize();
    return;
  }
  MPI_Comm_free(&comm_);
}

std::string MpiCommunicator::world_text() const {
  std::string text = "over " + std::to_string(size_) + " ranks";
  if (is_world_) return text;
  text += " of the group of world ranks ";
  for (std::size_t index = 0; index < world_ranks_.size(); ++index) {
    text += (index == 0 ? "" : ", ") + std::to_string(world_ranks_[index]);
  }
  return text;
}

std::string MpiCommunicator::self_text() const {
  if (is_world_) return "rank " + std::to_string(rank_);
  std::string group;
  for (std::size_t index = 0; index < world_ranks_.size(); ++index) {
    group += (index == 0 ? "" : ", ") + std::to_string(world_ranks_[index]);
  }
  return "world rank " + std::to_string(world_ranks_[static_cast<std::size_t>(rank_)]) + " (rank " +
         std::to_string(rank_) + " of the group of world ranks " + group + ")";
}

PendingOperation MpiCommunicator::begin(const std::string& what) const {
  require_owner_thread(what);
  if (!failed_operations_.empty()) {
    throw CommunicationError(self_text() + ": " + what + " refused: an earlier operation (" +
                             failed_operations_.front().description() +
                             ") failed while MPI still held its buffers; end the job (Communicator::abort)");
  }
  return PendingOperation(self_text() + ": " + what);
}

void MpiCommunicator::require_owner_thread(const std::string& what) const {
  if (std::this_thread::get_id() != owner_thread_) {
    throw CommunicationError(what + " was called from a thread other than the one that created the communicator: MPI "
                             "runs at thread level MPI_THREAD_FUNNELED, so every call must come from that thread");
  }
}

void MpiCommunicator::require_root(int root, const std::string& what) const {
  if (root < 0 || root >= size_) {
    throw CommunicationError(self_text() + ": " + what + ": root rank " + std::to_string(root) +
                             " is not a rank of a " + (is_world_ ? "world" : "group") + " of " +
                             std::to_string(size_));
  }
}

void MpiCommunicator::require_peer(int peer, int tag, const std::string& what) const {
  const std::string context = self_text() + ": " + what;
  if (peer < 0 || peer >= size_) {
    throw CommunicationError(context + ": there is no rank " + std::to_string(peer) + " in a " +
                             (is_world_ ? "world" : "group") + " of " + std::to_string(size_));
  }
  if (peer == rank_) throw CommunicationError(context + ": a message to itself is an error");
  if (tag < 0 || tag > tag_upper_bound_) {
    throw CommunicationError(context + ": tags run from 0 to " + std::to_string(tag_upper_bound_) + " (MPI_TAG_UB)");
  }
}

void MpiCommunicator::retain_if_in_flight(PendingOperation& operation) {
  if (operation.in_flight()) failed_operations_.push_back(std::move(operation));
}

bool MpiCommunicator::test(PendingOperation& operation) {
  require_owner_thread(operation.description());
  try {
    return operation.test();
  } catch (const CommunicationError&) {
    retain_if_in_flight(operation);
    throw;
  }
}

void MpiCommunicator::complete(PendingOperation& operation) {
  require_owner_thread(operation.description());
  try {
    operation.wait(timeout());
  } catch (const CommunicationError&) {
    retain_if_in_flight(operation);
    throw;
  }
}

void MpiCommunicator::barrier() {
  run("barrier " + world_text(), [&](PendingOperation& operation) {
    MPI_Request request = MPI_REQUEST_NULL;
    FERRY_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    operation.add(request);
  });
}

void MpiCommunicator::abort(int exit_code) {
  flush_standard_streams();
  MPI_Abort(context_->world, exit_code);  // the job's ranks (torchrun's joined world too)
  std::_Exit(exit_code);  // MPI_Abort does not return; should it, this process still ends
}

std::unique_ptr<Communicator> make_mpi_communicator(const RankEnvironment& environment,
                                                    const MpiCommunicatorOptions& options) {
  if (options.max_message_chunk_bytes < 1 || options.max_message_chunk_bytes > static_cast<std::size_t>(INT_MAX)) {
    throw std::invalid_argument("MpiCommunicatorOptions::max_message_chunk_bytes " +
                                std::to_string(options.max_message_chunk_bytes) + " must be 1 to " +
                                std::to_string(INT_MAX));
  }
  return std::make_unique<MpiCommunicator>(environment, options);
}

}  // namespace ferry
