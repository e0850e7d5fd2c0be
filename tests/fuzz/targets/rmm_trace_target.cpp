// RMM's logging_resource_adaptor CSV, as `ferry replay` reads it.
#include <sstream>
#include <stdexcept>
#include <string>

#include "allocator/rmm_trace.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_rmm_trace(const std::uint8_t* data, std::size_t size) {
  std::istringstream input{std::string(text_of(data, size))};
  try {
    (void)read_rmm_trace(input, "fuzz.csv");
  } catch (const std::exception& error) {
    require_own_words(error, text_of(data, size));  // RmmTraceError and its kin: a named line and field
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_rmm_trace)
