#include "engine/pipeline/pipeline_transports.h"

#include <vector>

namespace ferry {

void CommunicatorTransport::exchange(std::span<const StageMessage> messages) {
  std::vector<PointToPoint> calls;
  calls.reserve(messages.size());
  for (const StageMessage& message : messages) {
    PointToPoint call;
    call.kind = message.send ? PointToPoint::Kind::send : PointToPoint::Kind::receive;
    if (message.send) {
      call.send_data = message.tensor.data();
    } else {
      call.receive_data = message.tensor.data();
    }
    call.bytes = message.tensor.nbytes();
    call.peer = message.peer_rank;
    call.tag = message.tag;
    calls.push_back(call);
  }
  communicator_.exchange_async(calls)->wait();
}

}  // namespace ferry
