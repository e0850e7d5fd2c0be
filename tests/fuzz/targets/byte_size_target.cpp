// Byte sizes as flags take them (512MiB, 2GiB, 80GB, 1048576).
#include <stdexcept>
#include <string>

#include "allocator/byte_size.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_byte_size(const std::uint8_t* data, std::size_t size) {
  try {
    (void)format_bytes(parse_byte_size(text_of(data, size)));
  } catch (const std::invalid_argument& error) {
    require_own_words(error, text_of(data, size));
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_byte_size)
