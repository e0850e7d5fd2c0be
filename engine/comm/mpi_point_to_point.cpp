// MpiCommunicator's messages: send_async and receive_async start one MPI_Isend or MPI_Irecv per chunk
// (the chunks of one message keep their order: MPI does not overtake between a pair of ranks on one
// tag), and MpiRequest (mpi_request.h) polls them under the communicator's timeout.
#include <optional>

#include "engine/comm/message_chunks.h"
#include "engine/comm/mpi_check.h"
#include "engine/comm/mpi_communicator_impl.h"
#include "engine/comm/mpi_request.h"

namespace ferry {

template <typename StartChunk>
std::unique_ptr<CommRequest> MpiCommunicator::start_message(const std::string& what, std::size_t bytes, int peer,
                                                            int tag, bool is_receive, StartChunk&& start_chunk) {
  require_peer(peer, tag, what);
  PendingOperation operation = begin(what);
  start(operation, [&](PendingOperation& pending) {
    for (const MessageChunk& chunk : split_into_chunks(bytes, 1, max_chunk_bytes_)) {
      MPI_Request request = MPI_REQUEST_NULL;
      start_chunk(chunk, request);
      pending.add(request, is_receive ? std::optional(static_cast<std::size_t>(chunk.element_count)) : std::nullopt);
    }
  });
  return std::make_unique<MpiRequest>(*this, std::move(operation));
}

std::unique_ptr<CommRequest> MpiCommunicator::send_async(const void* data, std::size_t bytes, int peer, int tag) {
  const std::string what = "send of " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer) +
                           " with tag " + std::to_string(tag);
  std::unique_ptr<CommRequest> request =
      start_message(what, bytes, peer, tag, false, [&](const MessageChunk& chunk, MPI_Request& chunk_request) {
        FERRY_MPI_CHECK(MPI_Isend(static_cast<const std::byte*>(data) + chunk.first_element, chunk.element_count,
                                  MPI_BYTE, peer, tag, comm_, &chunk_request));
      });
  count_bytes_sent(bytes);
  return request;
}

std::unique_ptr<CommRequest> MpiCommunicator::receive_async(void* data, std::size_t bytes, int peer, int tag) {
  const std::string what = "receive of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer) +
                           " with tag " + std::to_string(tag);
  return start_message(what, bytes, peer, tag, true, [&](const MessageChunk& chunk, MPI_Request& request) {
    FERRY_MPI_CHECK(MPI_Irecv(static_cast<std::byte*>(data) + chunk.first_element, chunk.element_count, MPI_BYTE,
                              peer, tag, comm_, &request));
  });
}

}  // namespace ferry
