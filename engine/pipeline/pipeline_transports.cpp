#include "engine/pipeline/pipeline_transports.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ferry {
namespace {

void require_message_size(const Tensor& into, std::size_t bytes, std::int32_t peer_rank, int tag) {
  if (into.nbytes() != bytes) {
    throw std::logic_error("a pipeline message of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer_rank) + " (tag " +
                           std::to_string(tag) + ") for a buffer of " + std::to_string(into.nbytes()));
  }
}

}  // namespace

CommunicatorTransport::~CommunicatorTransport() {
  try {
    finish_sends();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry: error: a pipeline send did not complete: %s\n", error.what());
  }
}

void CommunicatorTransport::send(std::int32_t peer_rank, int tag, const Tensor& tensor) {
  if (!tensor.device().has_storage()) throw std::invalid_argument("a pipeline across processes needs a device with memory, not meta");
  pending_.push_back({communicator_.send_async(tensor.data(), tensor.nbytes(), peer_rank, tag), tensor});
}

bool CommunicatorTransport::receive(std::int32_t peer_rank, int tag, const Tensor& into) {
  release_completed();
  communicator_.receive(into.data(), into.nbytes(), peer_rank, tag);
  return true;
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

void PipelineMailbox::post(std::int32_t from, std::int32_t to, int tag, Tensor tensor) {
  messages_[{from, to, tag}].push_back(std::move(tensor));
}

Tensor PipelineMailbox::take(std::int32_t from, std::int32_t to, int tag) {
  const auto found = messages_.find({from, to, tag});
  if (found == messages_.end() || found->second.empty()) return Tensor();
  Tensor tensor = std::move(found->second.front());
  found->second.pop_front();
  if (found->second.empty()) messages_.erase(found);
  return tensor;
}

std::int64_t PipelineMailbox::bytes_from(std::int32_t from, MemoryCategory category) const {
  std::int64_t bytes = 0;
  for (const auto& [key, queue] : messages_) {
    if (std::get<0>(key) != from) continue;
    for (const Tensor& tensor : queue) {
      if (tensor.category() == category) bytes += static_cast<std::int64_t>(tensor.storage()->bytes());
    }
  }
  return bytes;
}

std::size_t PipelineMailbox::count_from(std::int32_t from) const {
  std::size_t count = 0;
  for (const auto& [key, queue] : messages_) {
    if (std::get<0>(key) == from) count += queue.size();
  }
  return count;
}

void InProcessTransport::send(std::int32_t peer_rank, int tag, const Tensor& tensor) { mailbox_.post(rank_, peer_rank, tag, tensor); }

bool InProcessTransport::receive(std::int32_t peer_rank, int tag, const Tensor& into) {
  const Tensor message = mailbox_.take(peer_rank, rank_, tag);
  if (!message.defined()) return false;
  require_message_size(into, message.nbytes(), peer_rank, tag);
  if (into.device().has_storage() && message.device().has_storage()) std::memcpy(into.data(), message.data(), into.nbytes());
  return true;
}

void InProcessTransport::finish_sends() {
  if (const std::size_t left = mailbox_.count_from(rank_); left > 0) {
    throw std::logic_error("rank " + std::to_string(rank_) + " sent " + std::to_string(left) + " pipeline messages nobody received");
  }
}

}  // namespace ferry
