// MpiCommunicator's collectives. A buffer that fits one MPI call (the chunk size, 1 GiB by default)
// takes one nonblocking collective; a larger one goes in chunks: all_reduce and broadcast chunk by
// chunk, reduce_scatter as one reduce per chunk onto each block's owner, all_gather as one broadcast
// per chunk from each block's owner (MPI counts are int, and totals can pass 2^31 elements). The
// asynchronous ones return an MpiRequest that keeps the int count arrays MPI reads until it completes,
// and that divides an average's result by the group's size once done.
#include <climits>
#include <cstring>
#include <memory>
#include <numeric>

#include "engine/comm/collective_layout.h"
#include "engine/comm/message_chunks.h"
#include "engine/comm/mpi_check.h"
#include "engine/comm/mpi_communicator_impl.h"
#include "engine/comm/mpi_request.h"
#include "engine/comm/reduction_arithmetic.h"

namespace ferry {
namespace {

std::byte* at(void* base, std::size_t byte_offset) { return static_cast<std::byte*>(base) + byte_offset; }
const std::byte* at(const void* base, std::size_t byte_offset) {
  return static_cast<const std::byte*>(base) + byte_offset;
}

bool is_half_precision(CommDataType type) { return type == CommDataType::bf16 || type == CommDataType::f16; }

// The int counts and displacements of MPI's variable-count collectives, kept alive by the request.
struct IntCounts {
  std::vector<int> counts;
  std::vector<int> displacements;
};
std::shared_ptr<IntCounts> int_counts(std::span<const std::size_t> counts) {
  auto converted = std::make_shared<IntCounts>();
  std::size_t offset = 0;
  for (const std::size_t count : counts) {
    converted->counts.push_back(static_cast<int>(count));
    converted->displacements.push_back(static_cast<int>(offset));
    offset += count;
  }
  return converted;
}

}  // namespace

MPI_Datatype MpiCommunicator::mpi_datatype(CommDataType type) const {
  switch (type) {
    case CommDataType::f32: return MPI_FLOAT;
    case CommDataType::f64: return MPI_DOUBLE;
    case CommDataType::i64: return MPI_INT64_T;
    case CommDataType::bf16:
    case CommDataType::f16: return context_->half_precision.datatype();
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

MPI_Op MpiCommunicator::mpi_operation(CommDataType type, ReduceOperation operation) const {
  if (is_half_precision(type)) return context_->half_precision.operation(type, operation);
  switch (operation) {
    case ReduceOperation::sum:
    case ReduceOperation::average: return MPI_SUM;
    case ReduceOperation::max: return MPI_MAX;
  }
  throw std::invalid_argument("unknown ReduceOperation " + std::to_string(static_cast<int>(operation)));
}

std::unique_ptr<CommRequest> MpiCommunicator::start_async(const std::string& what,
                                                          const std::function<void(PendingOperation&)>& start_requests,
                                                          std::function<void()> finish) {
  PendingOperation operation = begin(what);
  start(operation, start_requests);
  return std::make_unique<MpiRequest>(*this, std::move(operation), std::move(finish));
}

std::unique_ptr<CommRequest> MpiCommunicator::all_reduce_async(void* data, std::size_t count, CommDataType type,
                                                               ReduceOperation operation) {
  const std::size_t element_bytes = comm_data_type_size(type);
  const std::string what = std::string("all_reduce (") + reduce_operation_name(operation) + ") of " +
                           describe_elements(count, type) + " " + world_text();
  std::function<void()> finish;
  if (operation == ReduceOperation::average) {
    finish = [data, count, type, ranks = size_] { divide_by_ranks(data, count, type, ranks); };
  }
  std::unique_ptr<CommRequest> request = start_async(
      what,
      [&](PendingOperation& pending) {
        for (const MessageChunk& chunk : split_into_chunks(count, element_bytes, max_chunk_bytes_)) {
          MPI_Request chunk_request = MPI_REQUEST_NULL;
          FERRY_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, at(data, chunk.first_element * element_bytes),
                                         chunk.element_count, mpi_datatype(type), mpi_operation(type, operation),
                                         comm_, &chunk_request));
          pending.add(chunk_request);
        }
      },
      std::move(finish));
  count_bytes_sent(all_reduce_bytes_sent(count * element_bytes, size_));
  return request;
}

std::unique_ptr<CommRequest> MpiCommunicator::reduce_scatter_async(const void* input, void* output,
                                                                   std::span<const std::size_t> counts,
                                                                   CommDataType type, ReduceOperation operation) {
  const std::size_t element_bytes = comm_data_type_size(type);
  const std::string what = std::string("reduce_scatter (") + reduce_operation_name(operation) + ") of " +
                           describe_counts(counts, type) + " " + world_text();
  require_count_per_rank(counts, size_, self_text() + ": " + what);
  const std::size_t own_count = counts[static_cast<std::size_t>(rank_)];
  std::function<void()> finish;
  if (operation == ReduceOperation::average) {
    finish = [output, own_count, type, ranks = size_] { divide_by_ranks(output, own_count, type, ranks); };
  }
  std::unique_ptr<CommRequest> request = start_async(
      what,
      [&](PendingOperation& pending) {
        MPI_Request part = MPI_REQUEST_NULL;
        if (fits_one_call(total_count(counts), element_bytes)) {
          const std::shared_ptr<IntCounts> converted = int_counts(counts);
          pending.keep_alive(converted);
          FERRY_MPI_CHECK(MPI_Ireduce_scatter(input, output, converted->counts.data(), mpi_datatype(type),
                                              mpi_operation(type, operation), comm_, &part));
          pending.add(part);
          return;
        }
        std::size_t block_first = 0;
        for (int owner = 0; owner < size_; ++owner) {
          const std::size_t block_count = counts[static_cast<std::size_t>(owner)];
          for (const MessageChunk& chunk : split_into_chunks(block_count, element_bytes, max_chunk_bytes_)) {
            const std::size_t input_element = block_first + chunk.first_element;
            void* owner_output = owner == rank_ ? at(output, chunk.first_element * element_bytes) : nullptr;
            FERRY_MPI_CHECK(MPI_Ireduce(at(input, input_element * element_bytes), owner_output, chunk.element_count,
                                        mpi_datatype(type), mpi_operation(type, operation), owner, comm_, &part));
            pending.add(part);
          }
          block_first += block_count;
        }
      },
      std::move(finish));
  count_bytes_sent(blocks_bytes_sent(counts, rank_, type));
  return request;
}

std::unique_ptr<CommRequest> MpiCommunicator::all_gather_async(const void* input, void* output,
                                                               std::span<const std::size_t> counts,
                                                               CommDataType type) {
  const std::size_t element_bytes = comm_data_type_size(type);
  const std::string what = "all_gather of " + describe_counts(counts, type) + " " + world_text();
  require_count_per_rank(counts, size_, self_text() + ": " + what);
  std::unique_ptr<CommRequest> request = start_async(
      what,
      [&](PendingOperation& pending) {
        const std::size_t own_count = counts[static_cast<std::size_t>(rank_)];
        std::byte* own_block = at(output, block_offset(counts, rank_) * element_bytes);
        const bool in_place = input == own_block;
        MPI_Request part = MPI_REQUEST_NULL;
        if (fits_one_call(total_count(counts), element_bytes)) {
          const std::shared_ptr<IntCounts> converted = int_counts(counts);
          pending.keep_alive(converted);
          FERRY_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : input, static_cast<int>(own_count),
                                          mpi_datatype(type), output, converted->counts.data(),
                                          converted->displacements.data(), mpi_datatype(type), comm_, &part));
          pending.add(part);
          return;
        }
        if (!in_place && own_count != 0) std::memmove(own_block, input, own_count * element_bytes);
        std::size_t block_first = 0;
        for (int owner = 0; owner < size_; ++owner) {
          const std::size_t block_count = counts[static_cast<std::size_t>(owner)];
          for (const MessageChunk& chunk : split_into_chunks(block_count, element_bytes, max_chunk_bytes_)) {
            FERRY_MPI_CHECK(MPI_Ibcast(at(output, (block_first + chunk.first_element) * element_bytes),
                                       chunk.element_count, mpi_datatype(type), owner, comm_, &part));
            pending.add(part);
          }
          block_first += block_count;
        }
      },
      {});
  count_bytes_sent(blocks_bytes_sent(counts, rank_, type));
  return request;
}

void MpiCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  const std::string what =
      "broadcast of " + std::to_string(bytes) + " bytes from root rank " + std::to_string(root) + " " + world_text();
  require_root(root, what);
  if (rank_ == root) count_bytes_sent(bytes);
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
    throw CommunicationError(self_text() + ": " + what + ": " + std::to_string(total) +
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
  if (rank_ != root) count_bytes_sent(value.size());
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
