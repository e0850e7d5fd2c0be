#include "engine/comm/message_chunks.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace ferry {

std::vector<MessageChunk> split_into_chunks(std::size_t element_count, std::size_t element_bytes,
                                            std::size_t max_chunk_bytes) {
  if (element_bytes == 0 || max_chunk_bytes == 0) {
    throw std::invalid_argument("split_into_chunks: element size " + std::to_string(element_bytes) +
                                " and chunk size " + std::to_string(max_chunk_bytes) + " must be positive");
  }
  const std::size_t elements_per_chunk =
      std::clamp<std::size_t>(max_chunk_bytes / element_bytes, 1, static_cast<std::size_t>(INT_MAX));
  std::vector<MessageChunk> chunks;
  chunks.reserve(element_count / elements_per_chunk + 1);
  std::size_t first = 0;
  do {
    const std::size_t count = std::min(elements_per_chunk, element_count - first);
    chunks.push_back(MessageChunk{first, static_cast<int>(count)});
    first += count;
  } while (first < element_count);
  return chunks;
}

}  // namespace ferry
