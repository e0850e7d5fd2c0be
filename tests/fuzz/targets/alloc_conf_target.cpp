// FERRY_ALLOC_CONF: PyTorch's allocator keys, parsed and, when valid, used to round every size class.
#include "allocator/allocator_config.h"
#include "allocator/allocator_errors.h"
#include "allocator/size_rounding.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_alloc_conf(const std::uint8_t* data, std::size_t size) {
  try {
    const AllocatorConfig config = AllocatorConfig::parse(text_of(data, size));
    for (std::size_t shift = 0; shift < 64; ++shift) round_size(std::size_t{1} << shift, config);  // no division by zero
    (void)config.to_string();
  } catch (const AllocatorError& error) {
    require_own_words(error, text_of(data, size));
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_alloc_conf)
