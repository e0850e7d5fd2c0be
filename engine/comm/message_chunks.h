// Splitting a buffer into pieces one MPI call can carry: MPI counts are int, so a buffer of more than
// INT_MAX elements travels as several operations of at most `max_chunk_bytes` each (1 GiB by default,
// far below the limit, so one chunk never strains a transport's buffers).
#pragma once

#include <cstddef>
#include <vector>

namespace ferry {

inline constexpr std::size_t kDefaultMaxChunkBytes = std::size_t{1} << 30;

struct MessageChunk {
  std::size_t first_element = 0;
  int element_count = 0;
};

// Consecutive chunks covering [0, element_count), each at most max(1, max_chunk_bytes / element_bytes)
// and INT_MAX elements; a single empty chunk for zero elements (an empty message is still a message).
// Throws std::invalid_argument for a zero element size or chunk size.
std::vector<MessageChunk> split_into_chunks(std::size_t element_count, std::size_t element_bytes,
                                            std::size_t max_chunk_bytes);

}  // namespace ferry
