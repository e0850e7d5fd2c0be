// Hugging Face safetensors files (checkpoints, --init-from): the header's JSON, dtypes, shapes and data
// offsets against the file's size. The bytes go to a memory file so the real reader opens them.
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/core/safetensors.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_safetensors(const std::uint8_t* data, std::size_t size) {
  const std::optional<MemoryFile> input = MemoryFile::of(data, size);
  if (!input) return 0;
  try {
    const SafetensorsFile file(input->path());
    for (const SafetensorsEntry& entry : file.entries()) (void)file.find(entry.name);
  } catch (const std::exception& error) {
    require_own_words(error, text_of(data, size));  // SafetensorsError, FileError: the file and what is wrong
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_safetensors)
