// The --config file: DeepSpeed's keys (batch sizes, optimizer, scheduler, fp16/bf16, zero_optimization,
// aio), Megatron's parallel sizes and ferry's own section, each mapped to the training options with its
// type and range checked; the "ferry" section's flags are then parsed as the command line would.
#include <sys/mman.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "engine/cli/train_options.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_config(const std::uint8_t* data, std::size_t size) {
  const int fd = ::memfd_create("fuzz.json", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    TrainOptions options;
    check_config_flags(apply_config_file(path, options), path);
  } catch (const std::invalid_argument&) {  // the key, what was found and what is allowed
  } catch (const std::runtime_error&) {     // FileError: the file
  }
  ::close(fd);
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_config)
