// A fuzz target: one parser fed arbitrary bytes. Each target defines `fuzz_<name>` (returns 0; typed
// errors are the expected outcome of bad input and are caught; a crash, a sanitizer report, a hang or an
// unbounded allocation is a finding). Built two ways: with clang and libFuzzer (scripts/fuzz.sh, where
// FERRY_LIBFUZZER makes it the LLVMFuzzerTestOneInput entry point), and into the corpus replay test,
// which runs every checked-in input through it in the ordinary and the sanitizer builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#ifdef FERRY_LIBFUZZER
#define FERRY_FUZZ_ENTRY(function)                                                        \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    return function(data, size);                                                          \
  }
#else
#define FERRY_FUZZ_ENTRY(function)
#endif

namespace ferry::fuzz {

inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

int fuzz_alloc_conf(const std::uint8_t* data, std::size_t size);
int fuzz_byte_size(const std::uint8_t* data, std::size_t size);
int fuzz_config(const std::uint8_t* data, std::size_t size);
int fuzz_json(const std::uint8_t* data, std::size_t size);
int fuzz_profile(const std::uint8_t* data, std::size_t size);
int fuzz_rmm_trace(const std::uint8_t* data, std::size_t size);
int fuzz_safetensors(const std::uint8_t* data, std::size_t size);
int fuzz_schedule(const std::uint8_t* data, std::size_t size);
int fuzz_snapshot(const std::uint8_t* data, std::size_t size);
int fuzz_token_shard(const std::uint8_t* data, std::size_t size);
int fuzz_trainer_state(const std::uint8_t* data, std::size_t size);

}  // namespace ferry::fuzz
