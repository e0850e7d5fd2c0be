// split_into_chunks: chunks cover the buffer in order, none is larger than the limit or INT_MAX
// elements, and an empty buffer is still one (empty) message.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <stdexcept>

#include "engine/comm/message_chunks.h"

namespace ferry {
namespace {

// The chunks are consecutive, cover [0, count) exactly and each holds `per_chunk` elements but the last.
void expect_chunks(std::size_t count, std::size_t element_bytes, std::size_t max_chunk_bytes, std::size_t per_chunk) {
  const std::vector<MessageChunk> chunks = split_into_chunks(count, element_bytes, max_chunk_bytes);
  ASSERT_FALSE(chunks.empty());
  std::size_t next = 0;
  for (std::size_t index = 0; index < chunks.size(); ++index) {
    EXPECT_EQ(chunks[index].first_element, next) << "chunk " << index;
    const auto elements = static_cast<std::size_t>(chunks[index].element_count);
    if (index + 1 < chunks.size()) {
      EXPECT_EQ(elements, per_chunk) << "chunk " << index;
    } else {
      EXPECT_GE(elements, count == 0 ? 0U : 1U);
      EXPECT_LE(elements, per_chunk);
    }
    next += elements;
  }
  EXPECT_EQ(next, count);
}

TEST(MessageChunks, CoverTheBufferWithinTheLimit) {
  expect_chunks(0, 4, 64, 16);
  expect_chunks(1, 8, 64, 8);
  expect_chunks(16, 4, 64, 16);
  expect_chunks(17, 4, 64, 16);
  expect_chunks(1000, 8, 24, 3);
  expect_chunks(1001, 1, 1000, 1000);
  expect_chunks(10, 8, 5, 1);  // an element larger than the limit still travels, one per chunk
}

TEST(MessageChunks, LargeBuffersSplitAtOneGibibyteAndIntMax) {
  const std::size_t five_gibibytes_and_seven = (std::size_t{5} << 30) + 7;
  const std::vector<MessageChunk> chunks = split_into_chunks(five_gibibytes_and_seven, 1, kDefaultMaxChunkBytes);
  ASSERT_EQ(chunks.size(), 6U);
  EXPECT_EQ(chunks[0].element_count, 1 << 30);
  EXPECT_EQ(chunks[5].first_element, std::size_t{5} << 30);
  EXPECT_EQ(chunks[5].element_count, 7);

  expect_chunks(std::size_t{3} * INT_MAX + 1, 1, SIZE_MAX, INT_MAX);  // counts are ints, whatever the limit
  expect_chunks(std::size_t{1} << 31, 8, kDefaultMaxChunkBytes, std::size_t{1} << 27);
}

TEST(MessageChunks, ZeroSizesAreErrors) {
  EXPECT_THROW(split_into_chunks(10, 0, 64), std::invalid_argument);
  EXPECT_THROW(split_into_chunks(10, 4, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ferry
