// How stage tensors travel between pipeline ranks: through the pipeline group's communicator (MPI
// between processes, NCCL between GPUs; in a one-process dry run a dry-run group, which moves nothing:
// tensors on meta have no bytes).
#pragma once

#include "engine/comm/communicator.h"
#include "engine/pipeline/pipeline_executor.h"

namespace ferry {

class CommunicatorTransport final : public PipelineTransport {
 public:
  explicit CommunicatorTransport(Communicator& communicator) : communicator_(communicator) {}

  // One exchange of the communicator (NCCL: one group), waited for.
  void exchange(std::span<const StageMessage> messages) override;

 private:
  Communicator& communicator_;
};

}  // namespace ferry
