// HostStagedCommunicator: device buffers through host memory over the bootstrap (MPI). Before an
// operation reads device memory the host waits for the device's queued work (every stream: the compute
// stream's kernels wrote what a collective reads); the operation's host copy lives in its request, which
// copies the result to the device when it completes (test() or wait(); the consumer waits for the
// request before it reads, as it does with NCCL's). Built with the NCCL backend (it needs CUDA's runtime).
#include <cstddef>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <vector>

#include "engine/comm/collective_layout.h"
#include "engine/comm/completed_request.h"
#include "engine/comm/host_staged_communicator.h"
#include "engine/comm/nccl_resources.h"

namespace ferry {
namespace {

bool is_device_memory(const void* data, std::size_t bytes) {
  if (bytes == 0) return false;  // an empty buffer is neither: every rank passes it to the bootstrap
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// `bytes` of host memory to the device, landed before the call returns: from pageable memory cudaMemcpy may
// return before the copy is done, and ferry's compute streams do not wait for the legacy stream it runs on.
void copy_to_device(int device, void* destination, const void* source, std::size_t bytes) {
  const DeviceGuard guard(device);
  FERRY_NCCL_CUDA_CHECK(cudaMemcpy(destination, source, bytes, cudaMemcpyHostToDevice));
  FERRY_NCCL_CUDA_CHECK(cudaDeviceSynchronize());
}

// A bootstrap request whose host copy goes to the device when it completes.
class StagedRequest final : public CommRequest {
 public:
  StagedRequest(std::unique_ptr<CommRequest> inner, std::vector<std::byte> staging, std::size_t offset, void* destination,
                std::size_t bytes, int device)
      : inner_(std::move(inner)), staging_(std::move(staging)), offset_(offset), destination_(destination), bytes_(bytes), device_(device) {}
  StagedRequest(const StagedRequest&) = delete;
  StagedRequest& operator=(const StagedRequest&) = delete;
  // A pending request is completed (the host buffer is about to go); a failure ends the job.
  ~StagedRequest() override {
    if (done_) return;
    try {
      wait();
    } catch (const std::exception& error) {
      std::cerr << std::string("ferry: a pending host-staged request was destroyed and did not complete: ") + error.what() +
                       "\nferry: ending the job\n";
      std::_Exit(EXIT_FAILURE);
    }
  }
  bool test() override {
    if (!done_ && inner_->test()) finish();
    return done_;
  }
  void wait() override {
    if (done_) return;
    inner_->wait();
    finish();
  }

 private:
  void finish() {
    if (destination_ != nullptr && bytes_ != 0) copy_to_device(device_, destination_, staging_.data() + offset_, bytes_);
    done_ = true;
  }

  std::unique_ptr<CommRequest> inner_;
  std::vector<std::byte> staging_;  // the bootstrap's buffer: its heap block stays where inner_ points
  std::size_t offset_;
  void* destination_;  // null: nothing comes back (a send)
  std::size_t bytes_;
  int device_;
  bool done_ = false;
};

class HostStagedCommunicator final : public NcclCommunicator {
 public:
  HostStagedCommunicator(Communicator* borrowed, std::unique_ptr<Communicator> owned, int device)
      : owned_bootstrap_(std::move(owned)), bootstrap_(owned_bootstrap_ ? owned_bootstrap_.get() : borrowed), device_(device) {
    set_timeout(bootstrap_->timeout());
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  int local_rank() const override { return bootstrap_->local_rank(); }
  std::string backend() const override { return "host-staged"; }
  int max_tag() const override { return bootstrap_->max_tag(); }
  int device() const override { return device_; }
  CUstream_st* stream() const override { return nullptr; }  // the legacy default stream: copies are synchronous
  void wait_for(CUevent_st* event) override {
    const DeviceGuard guard(device_);
    FERRY_NCCL_CUDA_CHECK(cudaEventSynchronize(event));
  }
  void order_after(CUstream_st* /*compute*/) override {}  // every operation waits for the whole device
  // Operations run on the calling thread, not on a stream: the profile's communication track stays empty.
  void record_operations(OpRecorder* /*recorder*/, StreamId /*stream*/) override {}
  std::unique_ptr<NcclCommunicator> split_nccl(int color, int key) override {
    return std::make_unique<HostStagedCommunicator>(nullptr, bootstrap_->split(color, key), device_);
  }

  std::unique_ptr<CommRequest> all_reduce_async(void* data, std::size_t count, CommDataType type,
                                                ReduceOperation operation) override {
    const std::size_t bytes = count * comm_data_type_size(type);
    if (!is_device_memory(data, bytes)) return counted([&] { return bootstrap_->all_reduce_async(data, count, type, operation); });
    if (size() == 1) return std::make_unique<CompletedRequest>();  // in place: one rank's values are the result
    return staged(to_host(data, bytes), 0, data, bytes,
                  [&](std::byte* host) { return bootstrap_->all_reduce_async(host, count, type, operation); });
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const void* input, void* output, std::span<const std::size_t> counts,
                                                    CommDataType type, ReduceOperation operation) override {
    require_count_per_rank(counts, size(), "reduce_scatter_async (host-staged)");
    const std::size_t element = comm_data_type_size(type);
    const std::size_t total = total_count(counts) * element;
    const std::size_t own = counts[static_cast<std::size_t>(rank())] * element;
    if (!is_device_memory(input, total)) {
      return counted([&] { return bootstrap_->reduce_scatter_async(input, output, counts, type, operation); });
    }
    if (size() == 1) return copy_on_device(output, input, own);
    // One host block: the input, then this rank's output after it.
    return staged(to_host(input, total, own), total, output, own, [&](std::byte* host) {
      return bootstrap_->reduce_scatter_async(host, host + total, counts, type, operation);
    });
  }
  std::unique_ptr<CommRequest> all_gather_async(const void* input, void* output, std::span<const std::size_t> counts,
                                                CommDataType type) override {
    require_count_per_rank(counts, size(), "all_gather_async (host-staged)");
    const std::size_t element = comm_data_type_size(type);
    const std::size_t total = total_count(counts) * element;
    if (!is_device_memory(output, total)) return counted([&] { return bootstrap_->all_gather_async(input, output, counts, type); });
    if (size() == 1) return copy_on_device(output, input, total);
    const std::size_t offset = block_offset(counts, rank()) * element;
    // The host copy of the whole output with this rank's block in place (the bootstrap's in-place form).
    synchronize_device();
    std::vector<std::byte> staging(total);
    const std::size_t own = counts[static_cast<std::size_t>(rank())] * element;
    if (own != 0) {
      const DeviceGuard guard(device_);
      FERRY_NCCL_CUDA_CHECK(cudaMemcpy(staging.data() + offset, input, own, cudaMemcpyDeviceToHost));
    }
    return staged(std::move(staging), 0, output, total,
                  [&](std::byte* host) { return bootstrap_->all_gather_async(host + offset, host, counts, type); });
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (!is_device_memory(data, bytes)) {
      counted([&] {
        bootstrap_->broadcast(data, bytes, root);
        return std::unique_ptr<CommRequest>();
      });
      return;
    }
    if (size() == 1) {
      bootstrap_->broadcast(nullptr, 0, root);  // checks the root
      return;
    }
    std::vector<std::byte> staging = to_host(data, bytes);
    counted([&] {
      bootstrap_->broadcast(staging.data(), bytes, root);
      return std::unique_ptr<CommRequest>();
    });
    copy_to_device(device_, data, staging.data(), bytes);
  }
  std::vector<std::string> gather_strings(const std::string& value, int root) override {
    std::vector<std::string> gathered;
    counted([&] {
      gathered = bootstrap_->gather_strings(value, root);
      return std::unique_ptr<CommRequest>();
    });
    return gathered;
  }
  // A send is done with the device memory once its host copy is made: its request is complete at once, so
  // the caller frees the buffer where a dry run's would, whatever the peer's timing. The message goes on
  // from the host copy, which this communicator keeps until MPI completes it (a failure then surfaces in
  // a later send, or ends the job when the communicator goes).
  std::unique_ptr<CommRequest> send_async(const void* data, std::size_t bytes, int peer, int tag) override {
    if (!is_device_memory(data, bytes)) return counted([&] { return bootstrap_->send_async(data, bytes, peer, tag); });
    std::erase_if(sending_, [](const std::unique_ptr<CommRequest>& send) { return send->test(); });
    sending_.push_back(staged(to_host(data, bytes), 0, nullptr, 0, [&](std::byte* host) { return bootstrap_->send_async(host, bytes, peer, tag); }));
    return std::make_unique<CompletedRequest>();
  }
  std::unique_ptr<CommRequest> receive_async(void* data, std::size_t bytes, int peer, int tag) override {
    if (!is_device_memory(data, bytes)) return bootstrap_->receive_async(data, bytes, peer, tag);
    return staged(std::vector<std::byte>(bytes), 0, data, bytes,
                  [&](std::byte* host) { return bootstrap_->receive_async(host, bytes, peer, tag); });
  }
  void barrier() override { bootstrap_->barrier(); }
  [[noreturn]] void abort(int exit_code) override {
    bootstrap_->abort(exit_code);
    std::_Exit(exit_code);  // the bootstrap's abort does not return; should it, this process still ends
  }

 private:
  // The host waits for every stream of the device: what the operation reads was written by queued kernels.
  void synchronize_device() const {
    const DeviceGuard guard(device_);
    FERRY_NCCL_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // One rank's reduce-scatter or all-gather: `bytes` from `source` to `destination` on the device, between
  // the device's queued work and what is queued after it.
  std::unique_ptr<CommRequest> copy_on_device(void* destination, const void* source, std::size_t bytes) const {
    if (destination != source && bytes != 0) {
      synchronize_device();
      const DeviceGuard guard(device_);
      FERRY_NCCL_CUDA_CHECK(cudaMemcpy(destination, source, bytes, cudaMemcpyDeviceToDevice));
      FERRY_NCCL_CUDA_CHECK(cudaDeviceSynchronize());
    }
    return std::make_unique<CompletedRequest>();
  }
  // A host copy of `bytes` of device memory, with `extra` bytes after it.
  std::vector<std::byte> to_host(const void* data, std::size_t bytes, std::size_t extra = 0) const {
    synchronize_device();
    std::vector<std::byte> staging(bytes + extra);
    const DeviceGuard guard(device_);
    FERRY_NCCL_CUDA_CHECK(cudaMemcpy(staging.data(), data, bytes, cudaMemcpyDeviceToHost));
    return staging;
  }
  // Runs a bootstrap operation and counts the bytes it sent as this communicator's.
  template <typename Operation>
  std::unique_ptr<CommRequest> counted(Operation&& operation) {
    const std::uint64_t before = bootstrap_->bytes_sent();
    std::unique_ptr<CommRequest> request = operation();
    count_bytes_sent(bootstrap_->bytes_sent() - before);
    return request;
  }
  // Starts `operation` on the host copy `staging` (it gets its first byte); the request keeps the copy and,
  // on completion, copies `bytes` from `offset` in it to `destination` (none when null).
  template <typename Operation>
  std::unique_ptr<CommRequest> staged(std::vector<std::byte> staging, std::size_t offset, void* destination, std::size_t bytes,
                                      Operation&& operation) {
    std::unique_ptr<CommRequest> inner = counted([&] { return operation(staging.data()); });
    return std::make_unique<StagedRequest>(std::move(inner), std::move(staging), offset, destination, bytes, device_);
  }

  std::unique_ptr<Communicator> owned_bootstrap_;  // a group's; first, so it outlives every use
  Communicator* bootstrap_;
  int device_;
  std::vector<std::unique_ptr<CommRequest>> sending_;  // sends of host copies MPI has not completed; last: waited for first
};

}  // namespace

std::unique_ptr<NcclCommunicator> make_host_staged_communicator(Communicator& bootstrap, int device_ordinal) {
  // Every rank learns whether all could pick a GPU before any goes on (none is left waiting).
  std::optional<std::string> failure;
  int device = 0;
  try {
    device = choose_cuda_device(bootstrap.local_rank(), device_ordinal);
  } catch (const CommunicationError& error) {
    failure = error.what();
  }
  std::int64_t failed_ranks = failure ? 1 : 0;
  bootstrap.all_reduce(&failed_ranks, 1, CommDataType::i64, ReduceOperation::sum);
  const std::string self = "rank " + std::to_string(bootstrap.rank()) + " of " + std::to_string(bootstrap.size()) +
                           ": make_host_staged_communicator: ";
  if (failure) throw CommunicationError(self + *failure);
  if (failed_ranks > 0) throw CommunicationError(self + std::to_string(failed_ranks) + " other rank(s) found no GPU (their own errors say why)");
  return std::make_unique<HostStagedCommunicator>(&bootstrap, nullptr, device);
}

}  // namespace ferry
