// The world of one rank: reductions leave the data as it is (an average over one rank is the value),
// gathers and scatters copy, every request is complete when returned, a split gives another single
// rank, and a message has no one to go to (a message to oneself is an error, not a silent copy: it
// would deadlock on MPI ranks that send before they receive).
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/collective_layout.h"
#include "engine/comm/communicator.h"
#include "engine/comm/completed_request.h"
#include "engine/comm/standard_streams.h"

namespace ferry {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "single"; }
  int max_tag() const override { return std::numeric_limits<int>::max(); }

  std::unique_ptr<Communicator> split(int, int) override {
    std::unique_ptr<Communicator> group = make_single_rank_communicator();
    group->set_timeout(timeout());
    return group;
  }

  std::unique_ptr<CommRequest> all_reduce_async(void*, std::size_t, CommDataType, ReduceOperation) override {
    return std::make_unique<CompletedRequest>();
  }

  std::unique_ptr<CommRequest> reduce_scatter_async(const void* input, void* output,
                                                    std::span<const std::size_t> counts, CommDataType type,
                                                    ReduceOperation operation) override {
    require_count_per_rank(counts, 1,
                           std::string("reduce_scatter (") + reduce_operation_name(operation) + ") on a single rank");
    copy(input, output, counts[0] * comm_data_type_size(type));
    return std::make_unique<CompletedRequest>();
  }

  std::unique_ptr<CommRequest> all_gather_async(const void* input, void* output, std::span<const std::size_t> counts,
                                                CommDataType type) override {
    require_count_per_rank(counts, 1, "all_gather on a single rank");
    copy(input, output, counts[0] * comm_data_type_size(type));
    return std::make_unique<CompletedRequest>();
  }

  void broadcast(void*, std::size_t bytes, int root) override {
    require_root("broadcast of " + std::to_string(bytes) + " bytes", root);
  }

  std::vector<std::string> gather_strings(const std::string& value, int root) override {
    require_root("gather_strings", root);
    return {value};
  }

  std::unique_ptr<CommRequest> send_async(const void*, std::size_t bytes, int peer, int tag) override {
    throw no_peer("send of " + std::to_string(bytes) + " bytes to", peer, tag);
  }

  std::unique_ptr<CommRequest> receive_async(void*, std::size_t bytes, int peer, int tag) override {
    throw no_peer("receive of " + std::to_string(bytes) + " bytes from", peer, tag);
  }

  void barrier() override {}

  [[noreturn]] void abort(int exit_code) override {
    flush_standard_streams();
    std::_Exit(exit_code);
  }

 private:
  static void copy(const void* input, void* output, std::size_t bytes) {
    if (bytes != 0 && input != output) std::memmove(output, input, bytes);
  }

  static void require_root(const std::string& operation, int root) {
    if (root != 0) {
      throw CommunicationError(operation + " with root rank " + std::to_string(root) +
                               ": the only rank of a single-rank job is 0");
    }
  }

  static CommunicationError no_peer(const std::string& operation, int peer, int tag) {
    const std::string message = operation + " rank " + std::to_string(peer) + " with tag " + std::to_string(tag);
    if (peer == 0) {
      return CommunicationError(message + ": a message to itself (rank 0 of a single-rank job) is an error");
    }
    return CommunicationError(message + ": a single-rank job has no rank " + std::to_string(peer));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() { return std::make_unique<SingleRankCommunicator>(); }

}  // namespace ferry
