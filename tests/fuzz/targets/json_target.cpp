// The bounded JSON reader behind configs, trainer_state.json, profile.json and safetensors headers;
// what it accepts is dumped again (the error paths that once recursed without bound).
#include "engine/core/bounded_json.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_json(const std::uint8_t* data, std::size_t size) {
  try {
    const nlohmann::json value = parse_bounded_json(text_of(data, size));
    (void)value.dump();
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_json)
