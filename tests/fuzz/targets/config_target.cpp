// The --config file: DeepSpeed's keys (batch sizes, optimizer, scheduler, fp16/bf16, zero_optimization,
// aio), Megatron's parallel sizes and ferry's own section, each mapped to the training options with its
// type and range checked; the "ferry" section's flags are then parsed as the command line would.
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/cli/train_flag_parser.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_config(const std::uint8_t* data, std::size_t size) {
  const std::optional<MemoryFile> input = MemoryFile::of(data, size);
  if (!input) return 0;
  const std::string path = input->path();
  try {
    TrainOptions options;
    check_config_flags(apply_config_file(path, options), path);
  } catch (const std::invalid_argument& error) {
    require_own_words(error, text_of(data, size));  // the key, what was found and what is allowed
  } catch (const std::runtime_error& error) {
    require_own_words(error, text_of(data, size));  // FileError: the file
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_config)
