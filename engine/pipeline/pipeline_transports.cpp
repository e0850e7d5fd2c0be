#include "engine/pipeline/pipeline_transports.h"

#include <cstdio>
#include <stdexcept>
#include <string>

namespace ferry {
CommunicatorTransport::~CommunicatorTransport() {
  try {
    finish_sends();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry: error: a pipeline send did not complete: %s\n", error.what());
  }
}

void CommunicatorTransport::send(std::int32_t peer_rank, int tag, const Tensor& tensor) {
  pending_.push_back({communicator_.send_async(tensor.data(), tensor.nbytes(), peer_rank, tag), tensor});
}

void CommunicatorTransport::receive(std::int32_t peer_rank, int tag, const Tensor& into) {
  release_completed();
  communicator_.receive(into.data(), into.nbytes(), peer_rank, tag);
}

void CommunicatorTransport::release_completed() {
  std::erase_if(pending_, [](PendingSend& send) { return send.request->test(); });
}

std::int64_t CommunicatorTransport::in_flight_bytes(MemoryCategory category) {
  release_completed();
  std::int64_t bytes = 0;
  for (const PendingSend& send : pending_) {
    if (send.tensor.category() == category) bytes += static_cast<std::int64_t>(send.tensor.storage()->bytes());
  }
  return bytes;
}

void CommunicatorTransport::finish_sends() {
  for (PendingSend& send : pending_) send.request->wait();
  pending_.clear();
}

}  // namespace ferry
