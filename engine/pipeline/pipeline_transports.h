// How stage tensors travel between pipeline ranks: through the pipeline group's communicator (MPI
// between processes; in a one-process dry run a dry-run group, which moves nothing: tensors on meta
// have no bytes).
#pragma once

#include <memory>
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
  void receive(std::int32_t peer_rank, int tag, const Tensor& into) override;
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

}  // namespace ferry
