// MpiCommunicator's collectives. A buffer that fits one MPI call (the chunk size, 1 GiB by default)
// takes one nonblocking collective; a larger one goes in chunks: all_reduce and broadcast chunk by
// chunk, reduce_scatter as one reduce per chunk onto each block's owner, all_gather as one broadcast
// per chunk from each block's owner (MPI counts are int, and totals can pass 2^31 elements).
#include <climits>
#include <cstring>
#include <memory>
#include <numeric>

#include "engine/comm/message_chunks.h"
#include "engine/comm/mpi_check.h"
#include "engine/comm/mpi_communicator_impl.h"

namespace ferry {
namespace {

MPI_Datatype mpi_datatype(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return MPI_FLOAT;
    case CommDataType::f64: return MPI_DOUBLE;
    case CommDataType::i64: return MPI_INT64_T;
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

MPI_Op mpi_operation(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum: return MPI_SUM;
    case ReduceOperation::max: return MPI_MAX;
  }
  throw std::invalid_argument("unknown ReduceOperation " + std::to_string(static_cast<int>(operation)));
}

std::byte* at(void* base, std::size_t byte_offset) { return static_cast<std::byte*>(base) + byte_offset; }
const std::byte* at(const void* base, std::size_t byte_offset) {
  return static_cast<const std::byte*>(base) + byte_offset;
}

// "1000 f64 (8000 bytes)"
std::string describe_elements(std::size_t count, CommDataType type) {
  return std::to_string(count) + " " + comm_data_type_name(type) + " (" +
         std::to_string(count * comm_data_type_size(type)) + " bytes)";
}

}  // namespace

void MpiCommunicator::all_reduce(void* data, std::size_t count, CommDataType type, ReduceOperation operation) {
  const std::size_t element_bytes = comm_data_type_size(type);
  const std::string what = std::string("all_reduce (") + reduce_operation_name(operation) + ") of " +
                           describe_elements(count, type) + " " + world_text();
  run(what, [&](PendingOperation& pending) {
    for (const MessageChunk& chunk : split_into_chunks(count, element_bytes, max_chunk_bytes_)) {
      MPI_Request request = MPI_REQUEST_NULL;
      FERRY_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, at(data, chunk.first_element * element_bytes), chunk.element_count,
                                     mpi_datatype(type), mpi_operation(operation), comm_, &request));
      pending.add(request);
    }
  });
}

void MpiCommunicator::reduce_scatter(const void* input, void* output, std::size_t count, CommDataType type) {
  const std::size_t element_bytes = comm_data_type_size(type);
  const std::string what = "reduce_scatter (sum) of " + describe_elements(count, type) + " per rank " + world_text();
  run(what, [&](PendingOperation& pending) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (fits_one_call(count * static_cast<std::size_t>(size_), element_bytes)) {
      FERRY_MPI_CHECK(MPI_Ireduce_scatter_block(input, output, static_cast<int>(count), mpi_datatype(type), MPI_SUM,
                                                comm_, &request));
      pending.add(request);
      return;
    }
    for (const MessageChunk& chunk : split_into_chunks(count, element_bytes, max_chunk_bytes_)) {
      for (int owner = 0; owner < size_; ++owner) {
        const std::size_t input_element = static_cast<std::size_t>(owner) * count + chunk.first_element;
        void* owner_output = owner == rank_ ? at(output, chunk.first_element * element_bytes) : nullptr;
        FERRY_MPI_CHECK(MPI_Ireduce(at(input, input_element * element_bytes), owner_output, chunk.element_count,
                                    mpi_datatype(type), MPI_SUM, owner, comm_, &request));
        pending.add(request);
      }
    }
  });
}

void MpiCommunicator::all_gather(const void* input, void* output, std::size_t count, CommDataType type) {
  const std::size_t element_bytes = comm_data_type_size(type);
  const std::string what = "all_gather of " + describe_elements(count, type) + " per rank " + world_text();
  run(what, [&](PendingOperation& pending) {
    std::byte* own_block = at(output, static_cast<std::size_t>(rank_) * count * element_bytes);
    const bool in_place = input == own_block;
    MPI_Request request = MPI_REQUEST_NULL;
    if (fits_one_call(count * static_cast<std::size_t>(size_), element_bytes)) {
      FERRY_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : input, static_cast<int>(count), mpi_datatype(type),
                                     output, static_cast<int>(count), mpi_datatype(type), comm_, &request));
      pending.add(request);
      return;
    }
    if (!in_place && count != 0) std::memmove(own_block, input, count * element_bytes);
    for (const MessageChunk& chunk : split_into_chunks(count, element_bytes, max_chunk_bytes_)) {
      for (int owner = 0; owner < size_; ++owner) {
        const std::size_t output_element = static_cast<std::size_t>(owner) * count + chunk.first_element;
        FERRY_MPI_CHECK(MPI_Ibcast(at(output, output_element * element_bytes), chunk.element_count, mpi_datatype(type),
                                   owner, comm_, &request));
        pending.add(request);
      }
    }
  });
}

void MpiCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  const std::string what =
      "broadcast of " + std::to_string(bytes) + " bytes from root rank " + std::to_string(root) + " " + world_text();
  require_root(root, what);
  run(what, [&](PendingOperation& pending) {
    for (const MessageChunk& chunk : split_into_chunks(bytes, 1, max_chunk_bytes_)) {
      MPI_Request request = MPI_REQUEST_NULL;
      FERRY_MPI_CHECK(MPI_Ibcast(at(data, chunk.first_element), chunk.element_count, MPI_BYTE, root, comm_, &request));
      pending.add(request);
    }
  });
}

std::vector<std::string> MpiCommunicator::gather_strings(const std::string& value, int root) {
  const std::string what = "gather_strings of " + std::to_string(value.size()) + " bytes to root rank " +
                           std::to_string(root) + " " + world_text();
  require_root(root, what);
  // Every rank learns every length, so all of them agree whether the total fits one call.
  struct Lengths {
    std::int64_t own;
    std::vector<std::int64_t> of_rank;
  };
  auto lengths = std::make_shared<Lengths>(Lengths{static_cast<std::int64_t>(value.size()),
                                                   std::vector<std::int64_t>(static_cast<std::size_t>(size_))});
  run(what + " (lengths)", [&](PendingOperation& pending) {
    pending.keep_alive(lengths);
    MPI_Request request = MPI_REQUEST_NULL;
    FERRY_MPI_CHECK(MPI_Iallgather(&lengths->own, 1, MPI_INT64_T, lengths->of_rank.data(), 1, MPI_INT64_T, comm_,
                                   &request));
    pending.add(request);
  });
  const std::int64_t total = std::accumulate(lengths->of_rank.begin(), lengths->of_rank.end(), std::int64_t{0});
  if (total > INT_MAX) {
    throw CommunicationError("rank " + std::to_string(rank_) + ": " + what + ": " + std::to_string(total) +
                             " bytes in all, more than gather_strings carries (" + std::to_string(INT_MAX) + ")");
  }

  struct Gathered {
    std::vector<int> counts;
    std::vector<int> displacements;
    std::string bytes;
  };
  auto gathered = std::make_shared<Gathered>();
  if (rank_ == root) {
    for (const std::int64_t length : lengths->of_rank) {
      gathered->displacements.push_back(static_cast<int>(gathered->bytes.size()));
      gathered->counts.push_back(static_cast<int>(length));
      gathered->bytes.resize(gathered->bytes.size() + static_cast<std::size_t>(length));
    }
  }
  auto sent = std::make_shared<std::string>(value);
  run(what + " (bytes)", [&](PendingOperation& pending) {
    pending.keep_alive(gathered);
    pending.keep_alive(sent);
    MPI_Request request = MPI_REQUEST_NULL;
    FERRY_MPI_CHECK(MPI_Igatherv(sent->data(), static_cast<int>(sent->size()), MPI_CHAR, gathered->bytes.data(),
                                 gathered->counts.data(), gathered->displacements.data(), MPI_CHAR, root, comm_,
                                 &request));
    pending.add(request);
  });
  if (rank_ != root) return {};
  std::vector<std::string> strings;
  for (int index = 0; index < size_; ++index) {
    const auto rank_index = static_cast<std::size_t>(index);
    strings.push_back(gathered->bytes.substr(static_cast<std::size_t>(gathered->displacements[rank_index]),
                                             static_cast<std::size_t>(gathered->counts[rank_index])));
  }
  return strings;
}

}  // namespace ferry
