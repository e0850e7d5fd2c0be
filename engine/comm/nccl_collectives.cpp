// NcclCommunicatorImpl's collectives and messages, each queued on the communicator's stream after the
// legacy default stream's work, and its request: a CUDA event recorded after the NCCL calls. Equal
// counts take NCCL's own reduce-scatter and all-gather; variable counts one ncclReduce or ncclBroadcast
// per nonempty block in one group. bytes_sent counts the ring figures of collective_layout.h.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <utility>

#include "engine/comm/collective_layout.h"
#include "engine/comm/nccl_check.h"
#include "engine/comm/nccl_communicator_impl.h"

namespace ferry {
namespace {

std::byte* at(void* base, std::size_t byte_offset) { return static_cast<std::byte*>(base) + byte_offset; }
const std::byte* at(const void* base, std::size_t byte_offset) {
  return static_cast<const std::byte*>(base) + byte_offset;
}

ncclDataType_t nccl_datatype(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return ncclFloat32;
    case CommDataType::f64: return ncclFloat64;
    case CommDataType::i64: return ncclInt64;
    case CommDataType::bf16: return ncclBfloat16;
    case CommDataType::f16: return ncclFloat16;
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

ncclRedOp_t nccl_operation(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum: return ncclSum;
    case ReduceOperation::max: return ncclMax;
    case ReduceOperation::average: return ncclAvg;
  }
  throw std::invalid_argument("unknown ReduceOperation " + std::to_string(static_cast<int>(operation)));
}

bool equal_counts(std::span<const std::size_t> counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

// Device (or managed) memory, as opposed to host memory, by CUDA's account of the pointer.
bool is_device_memory(const void* data) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// Whether a buffer of `count` elements is device memory (an empty one is neither: every rank skips it).
bool is_device_buffer(const void* data, std::size_t count) { return count != 0 && is_device_memory(data); }

// ncclGroupStart .. ncclGroupEnd; a group left by an exception is still ended (its error ignored: the
// exception already says what went wrong).
class NcclGroup {
 public:
  NcclGroup() { FERRY_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    FERRY_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

// The request of one operation: complete once its event is. A failure is kept and thrown again by
// every later test() or wait(), so a failed request never looks complete.
class NcclRequest final : public CommRequest {
 public:
  NcclRequest(NcclCommunicatorImpl& communicator, std::string what, CudaEvent begun, CudaEvent event)
      : communicator_(communicator), what_(std::move(what)), begun_(std::move(begun)), event_(std::move(event)) {}
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;
  // Waits for a pending operation; ends the job when that fails (a destructor cannot throw, and the
  // buffer's owner is about to free it). An operation of a communicator that failed since ended with
  // its ncclCommAbort, which already threw: nothing to wait for.
  ~NcclRequest() override {
    if (done_ || failure_ || communicator_.failed()) return;
    try {
      wait();
    } catch (const std::exception& error) {
      std::cerr << std::string("ferry: a pending request was destroyed and did not complete: ") + error.what() +
                       "\nferry: ending the job\n";
      communicator_.abort(EXIT_FAILURE);
    }
  }

  bool test() override {
    return settle([&] { return communicator_.poll(event_.get(), what_); });
  }
  void wait() override {
    settle([&] {
      communicator_.complete(event_.get(), what_);
      return true;
    });
  }

 private:
  template <typename Poll>
  bool settle(Poll&& poll) {
    if (failure_) throw CommunicationError(*failure_);
    if (done_) return true;
    try {
      done_ = poll();
      if (done_) communicator_.count_stream_time(begun_.get(), event_.get(), what_);
      return done_;
    } catch (const CommunicationError& error) {
      failure_ = error.what();
      throw;
    }
  }

  NcclCommunicatorImpl& communicator_;
  std::string what_;
  CudaEvent begun_;  // recorded on the stream before the operation's calls, after its waits
  CudaEvent event_;
  bool done_ = false;
  std::optional<std::string> failure_;
};

}  // namespace

template <typename Operation>
std::unique_ptr<CommRequest> NcclCommunicatorImpl::on_bootstrap(Operation&& operation) {
  require_usable("an operation on host memory " + world_text());
  const std::uint64_t before = bootstrap_->bytes_sent();
  std::unique_ptr<CommRequest> request = operation();
  count_bytes_sent(bootstrap_->bytes_sent() - before);
  return request;
}

template <typename Calls>
std::unique_ptr<CommRequest> NcclCommunicatorImpl::start(const std::string& what, Calls&& calls) {
  require_usable(what);
  const DeviceGuard guard(device_);
  try {
    // The operation's inputs may come from work on the legacy default stream (or a blocking stream).
    FERRY_NCCL_CUDA_CHECK(cudaEventRecord(order_event_.get(), cudaStreamLegacy));
    FERRY_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), order_event_.get(), 0));
    if (compute_ != nullptr) {  // the wait above took the event's state: it can be recorded again
      FERRY_NCCL_CUDA_CHECK(cudaEventRecord(order_event_.get(), compute_));
      FERRY_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), order_event_.get(), 0));
    }
    CudaEvent begun(device_, /*timing=*/true);
    FERRY_NCCL_CUDA_CHECK(cudaEventRecord(begun.get(), stream_.get()));
    calls();
    CudaEvent done(device_, /*timing=*/true);
    FERRY_NCCL_CUDA_CHECK(cudaEventRecord(done.get(), stream_.get()));
    return std::make_unique<NcclRequest>(*this, what, std::move(begun), std::move(done));
  } catch (const CommunicationError& error) {
    throw fail(what + ": " + error.what());
  }
}

std::unique_ptr<CommRequest> NcclCommunicatorImpl::all_reduce_async(void* data, std::size_t count, CommDataType type,
                                                                    ReduceOperation operation) {
  if (!is_device_buffer(data, count)) {  // host values: the bootstrap's
    return on_bootstrap([&] { return bootstrap_->all_reduce_async(data, count, type, operation); });
  }
  const std::string what = std::string("all_reduce (") + reduce_operation_name(operation) + ") of " +
                           describe_elements(count, type) + " " + world_text();
  std::unique_ptr<CommRequest> request = start(what, [&] {
    if (count == 0) return;
    FERRY_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_datatype(type), nccl_operation(operation), comm_.get(),
                                   stream_.get()));
  });
  count_bytes_sent(all_reduce_bytes_sent(count * comm_data_type_size(type), size_));
  return request;
}

std::unique_ptr<CommRequest> NcclCommunicatorImpl::reduce_scatter_async(const void* input, void* output,
                                                                        std::span<const std::size_t> counts,
                                                                        CommDataType type, ReduceOperation operation) {
  if (!is_device_buffer(input, total_count(counts))) {
    return on_bootstrap([&] { return bootstrap_->reduce_scatter_async(input, output, counts, type, operation); });
  }
  const std::string what = std::string("reduce_scatter (") + reduce_operation_name(operation) + ") of " +
                           describe_counts(counts, type) + " " + world_text();
  require_count_per_rank(counts, size_, self_text() + ": " + what);
  const std::size_t element_bytes = comm_data_type_size(type);
  std::unique_ptr<CommRequest> request = start(what, [&] {
    if (total_count(counts) == 0) return;
    if (equal_counts(counts)) {
      FERRY_NCCL_CHECK(ncclReduceScatter(input, output, counts[0], nccl_datatype(type), nccl_operation(operation),
                                         comm_.get(), stream_.get()));
      return;
    }
    // One reduce onto each block's owner (NCCL reads the receive buffer at the root only).
    NcclGroup group;
    std::size_t block_first = 0;
    for (int owner = 0; owner < size_; ++owner) {
      const std::size_t block_count = counts[static_cast<std::size_t>(owner)];
      if (block_count != 0) {
        FERRY_NCCL_CHECK(ncclReduce(at(input, block_first * element_bytes), output, block_count, nccl_datatype(type),
                                    nccl_operation(operation), owner, comm_.get(), stream_.get()));
      }
      block_first += block_count;
    }
    group.end();
  });
  count_bytes_sent(blocks_bytes_sent(counts, rank_, type));
  return request;
}

std::unique_ptr<CommRequest> NcclCommunicatorImpl::all_gather_async(const void* input, void* output,
                                                                    std::span<const std::size_t> counts,
                                                                    CommDataType type) {
  if (!is_device_buffer(output, total_count(counts))) {
    return on_bootstrap([&] { return bootstrap_->all_gather_async(input, output, counts, type); });
  }
  const std::string what = "all_gather of " + describe_counts(counts, type) + " " + world_text();
  require_count_per_rank(counts, size_, self_text() + ": " + what);
  const std::size_t element_bytes = comm_data_type_size(type);
  std::unique_ptr<CommRequest> request = start(what, [&] {
    if (total_count(counts) == 0) return;
    if (equal_counts(counts)) {
      // In place when `input` is this rank's block of `output`, as NCCL defines it.
      FERRY_NCCL_CHECK(ncclAllGather(input, output, counts[0], nccl_datatype(type), comm_.get(), stream_.get()));
      return;
    }
    // One broadcast from each block's owner into the block (in place when `input` is the own block).
    NcclGroup group;
    std::size_t block_first = 0;
    for (int owner = 0; owner < size_; ++owner) {
      const std::size_t block_count = counts[static_cast<std::size_t>(owner)];
      if (block_count != 0) {
        void* block = at(output, block_first * element_bytes);
        const void* source = owner == rank_ ? input : block;
        FERRY_NCCL_CHECK(
            ncclBroadcast(source, block, block_count, nccl_datatype(type), owner, comm_.get(), stream_.get()));
      }
      block_first += block_count;
    }
    group.end();
  });
  count_bytes_sent(blocks_bytes_sent(counts, rank_, type));
  return request;
}

void NcclCommunicatorImpl::broadcast(void* data, std::size_t bytes, int root) {
  const std::string what =
      "broadcast of " + std::to_string(bytes) + " bytes from root rank " + std::to_string(root) + " " + world_text();
  if (root < 0 || root >= size_) {
    throw CommunicationError(self_text() + ": " + what + ": the root is not a rank of the " +
                             std::to_string(size_) + " ranks");
  }
  require_usable(what);
  if (is_device_buffer(data, bytes)) {
    start(what, [&] {
      FERRY_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_.get(), stream_.get()));
    })->wait();
  } else {
    bootstrap_->broadcast(data, bytes, root);
  }
  if (rank_ == root) count_bytes_sent(bytes);
}

std::vector<std::string> NcclCommunicatorImpl::gather_strings(const std::string& value, int root) {
  require_usable("gather_strings " + world_text());
  std::vector<std::string> strings = bootstrap_->gather_strings(value, root);
  if (rank_ != root) count_bytes_sent(value.size());
  return strings;
}

void NcclCommunicatorImpl::barrier() {
  require_usable("barrier " + world_text());
  bootstrap_->barrier();
}

void NcclCommunicatorImpl::require_peer(int peer, int tag, const std::string& what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw CommunicationError(self_text() + ": " + what + ": the peer must be another of the " +
                             std::to_string(size_) + " ranks");
  }
  if (tag < 0) throw CommunicationError(self_text() + ": " + what + ": a tag is 0 or more");
}

std::unique_ptr<CommRequest> NcclCommunicatorImpl::send_async(const void* data, std::size_t bytes, int peer,
                                                              int tag) {
  const std::string what = "send of " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer) +
                           " (tag " + std::to_string(tag) + ") " + world_text();
  require_peer(peer, tag, what);
  if (!is_device_buffer(data, bytes)) return on_bootstrap([&] { return bootstrap_->send_async(data, bytes, peer, tag); });
  std::unique_ptr<CommRequest> request = start(
      what, [&] { FERRY_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, peer, comm_.get(), stream_.get())); });
  count_bytes_sent(bytes);
  return request;
}

std::unique_ptr<CommRequest> NcclCommunicatorImpl::exchange_async(std::span<const PointToPoint> messages) {
  const auto on_device = [](const PointToPoint& message) {
    return is_device_buffer(message.kind == PointToPoint::Kind::send ? message.send_data : message.receive_data, message.bytes);
  };
  // Host buffers (or none at all) go message by message, through the bootstrap.
  if (messages.empty() || !std::all_of(messages.begin(), messages.end(), on_device)) return Communicator::exchange_async(messages);
  std::string what = "exchange of";
  std::uint64_t sent = 0;
  for (const PointToPoint& message : messages) {
    const bool sends = message.kind == PointToPoint::Kind::send;
    require_peer(message.peer, message.tag, "exchange with rank " + std::to_string(message.peer));
    what += std::string(what.back() == 'f' ? " " : ", ") + (sends ? "a send of " : "a receive of ") + std::to_string(message.bytes) +
            " bytes " + (sends ? "to" : "from") + " rank " + std::to_string(message.peer) + " (tag " + std::to_string(message.tag) + ")";
    if (sends) sent += message.bytes;
  }
  what += " " + world_text();
  std::unique_ptr<CommRequest> request = start(what, [&] {
    NcclGroup group;
    for (const PointToPoint& message : messages) {
      if (message.kind == PointToPoint::Kind::send) {
        FERRY_NCCL_CHECK(ncclSend(message.send_data, message.bytes, ncclUint8, message.peer, comm_.get(), stream_.get()));
      } else {
        FERRY_NCCL_CHECK(ncclRecv(message.receive_data, message.bytes, ncclUint8, message.peer, comm_.get(), stream_.get()));
      }
    }
    group.end();
  });
  count_bytes_sent(sent);
  return request;
}

std::unique_ptr<CommRequest> NcclCommunicatorImpl::receive_async(void* data, std::size_t bytes, int peer, int tag) {
  const std::string what = "receive of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer) +
                           " (tag " + std::to_string(tag) + ") " + world_text();
  require_peer(peer, tag, what);
  if (!is_device_buffer(data, bytes)) return on_bootstrap([&] { return bootstrap_->receive_async(data, bytes, peer, tag); });
  return start(what, [&] { FERRY_NCCL_CHECK(ncclRecv(data, bytes, ncclUint8, peer, comm_.get(), stream_.get())); });
}

}  // namespace ferry
