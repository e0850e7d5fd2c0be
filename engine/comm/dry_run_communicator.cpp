// The dry-run communicator: one process plays rank `rank` of `size` (each group of a grid gets its own,
// made by the caller). Every operation completes when it starts, moves nothing and leaves every
// buffer untouched, but checks its arguments as a real backend would and counts bytes_sent as if the
// data had moved, so a dry run reports each rank's traffic.
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/collective_layout.h"
#include "engine/comm/communicator.h"
#include "engine/comm/completed_request.h"
#include "engine/comm/standard_streams.h"

namespace ferry {
namespace {

class DryRunCommunicator final : public Communicator {
 public:
  DryRunCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return rank_; }  // every rank of a dry run sits on this one node
  std::string backend() const override { return "dry-run"; }
  int max_tag() const override { return std::numeric_limits<int>::max(); }

  std::unique_ptr<Communicator> split(int, int) override {
    throw std::logic_error("a dry-run communicator cannot split: build its groups with make_dry_run_communicator");
  }

  std::unique_ptr<CommRequest> all_reduce_async(void*, std::size_t count, CommDataType type,
                                                ReduceOperation) override {
    count_bytes_sent(all_reduce_bytes_sent(count * comm_data_type_size(type), size_));
    return std::make_unique<CompletedRequest>();
  }

  std::unique_ptr<CommRequest> reduce_scatter_async(const void*, void*, std::span<const std::size_t> counts,
                                                    CommDataType type, ReduceOperation operation) override {
    require_count_per_rank(counts, size_,
                           context() + ": reduce_scatter (" + reduce_operation_name(operation) + ") of " +
                               describe_counts(counts, type));
    count_bytes_sent(blocks_bytes_sent(counts, rank_, type));
    return std::make_unique<CompletedRequest>();
  }

  std::unique_ptr<CommRequest> all_gather_async(const void*, void*, std::span<const std::size_t> counts,
                                                CommDataType type) override {
    require_count_per_rank(counts, size_, context() + ": all_gather of " + describe_counts(counts, type));
    count_bytes_sent(blocks_bytes_sent(counts, rank_, type));
    return std::make_unique<CompletedRequest>();
  }

  void broadcast(void*, std::size_t bytes, int root) override {
    require_root(root, "broadcast of " + std::to_string(bytes) + " bytes");
    if (root == rank_) count_bytes_sent(bytes);
  }

  std::vector<std::string> gather_strings(const std::string& value, int root) override {
    require_root(root, "gather_strings of " + std::to_string(value.size()) + " bytes");
    if (root != rank_) {
      count_bytes_sent(value.size());
      return {};
    }
    std::vector<std::string> strings(static_cast<std::size_t>(size_));
    strings[static_cast<std::size_t>(rank_)] = value;
    return strings;
  }

  std::unique_ptr<CommRequest> send_async(const void*, std::size_t bytes, int peer, int tag) override {
    require_peer(peer, tag, "send of " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer));
    count_bytes_sent(bytes);
    return std::make_unique<CompletedRequest>();
  }

  std::unique_ptr<CommRequest> receive_async(void*, std::size_t bytes, int peer, int tag) override {
    require_peer(peer, tag, "receive of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer));
    return std::make_unique<CompletedRequest>();
  }

  void barrier() override {}

  [[noreturn]] void abort(int exit_code) override {
    flush_standard_streams();
    std::_Exit(exit_code);
  }

 private:
  std::string context() const {
    return "dry-run rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }

  void require_root(int root, const std::string& operation) const {
    if (root < 0 || root >= size_) {
      throw CommunicationError(context() + ": " + operation + " with root rank " + std::to_string(root) +
                               ": no such rank");
    }
  }

  void require_peer(int peer, int tag, const std::string& operation) const {
    const std::string message = context() + ": " + operation + " with tag " + std::to_string(tag);
    if (peer < 0 || peer >= size_) throw CommunicationError(message + ": there is no rank " + std::to_string(peer));
    if (peer == rank_) throw CommunicationError(message + ": a message to itself is an error");
    if (tag < 0) throw CommunicationError(message + ": tags are 0 or more");
  }

  int rank_;
  int size_;
};

}  // namespace

std::unique_ptr<Communicator> make_dry_run_communicator(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument("make_dry_run_communicator: rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + ": a size of 1 or more and a rank from 0 to size - 1");
  }
  return std::make_unique<DryRunCommunicator>(rank, size);
}

}  // namespace ferry
