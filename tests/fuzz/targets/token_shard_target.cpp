// Training data (--data, --eval-data): an llm.c token shard (magic, version and token count against the
// file's size) or, without the shard magic, plain text. The bytes go to a memory file so the real reader
// opens them.
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/data/token_data.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_token_shard(const std::uint8_t* data, std::size_t size) {
  const std::optional<MemoryFile> input = MemoryFile::of(data, size);
  if (!input) return 0;
  try {
    const TokenDataset dataset = TokenDataset::open(input->path());
    (void)dataset.vocab_needed();
  } catch (const std::exception& error) {
    require_own_words(error, text_of(data, size));  // DataError, FileError: the file and what is wrong
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_token_shard)
