// The two ways stage tensors travel: between processes through the communicator (MPI), and between
// executors of one process through a mailbox (tests, dry runs, the memory benchmark), where a receive
// that has not arrived yet hands the turn to another rank instead of waiting.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/pipeline/pipeline_executor.h"

namespace ferry {

class CommunicatorTransport final : public PipelineTransport {
 public:
  explicit CommunicatorTransport(Communicator& communicator) : communicator_(communicator) {}
  ~CommunicatorTransport() override;
  CommunicatorTransport(const CommunicatorTransport&) = delete;
  CommunicatorTransport& operator=(const CommunicatorTransport&) = delete;

  void send(std::int32_t peer_rank, int tag, const Tensor& tensor) override;
  bool receive(std::int32_t peer_rank, int tag, const Tensor& into) override;
  std::int64_t in_flight_bytes(MemoryCategory category) override;
  void finish_sends() override;

 private:
  struct PendingSend {
    std::unique_ptr<CommRequest> request;
    Tensor tensor;
  };
  void release_completed();

  Communicator& communicator_;
  std::vector<PendingSend> pending_;
};

// Messages between the ranks of one process, in order per (from, to, tag).
class PipelineMailbox {
 public:
  void post(std::int32_t from, std::int32_t to, int tag, Tensor tensor);
  // The oldest message, or an undefined tensor when none is there.
  Tensor take(std::int32_t from, std::int32_t to, int tag);
  std::int64_t bytes_from(std::int32_t from, MemoryCategory category) const;
  std::size_t count_from(std::int32_t from) const;

 private:
  std::map<std::tuple<std::int32_t, std::int32_t, int>, std::deque<Tensor>> messages_;
};

class InProcessTransport final : public PipelineTransport {
 public:
  InProcessTransport(PipelineMailbox& mailbox, std::int32_t rank) : mailbox_(mailbox), rank_(rank) {}
  void send(std::int32_t peer_rank, int tag, const Tensor& tensor) override;
  bool receive(std::int32_t peer_rank, int tag, const Tensor& into) override;
  std::int64_t in_flight_bytes(MemoryCategory category) override { return mailbox_.bytes_from(rank_, category); }
  void finish_sends() override;

 private:
  PipelineMailbox& mailbox_;
  std::int32_t rank_;
};

}  // namespace ferry
