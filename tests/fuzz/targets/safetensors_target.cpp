// Hugging Face safetensors files (checkpoints, --init-from): the header's JSON, dtypes, shapes and data
// offsets against the file's size. The bytes go to a memory file so the real reader opens them.
#include <sys/mman.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "engine/core/safetensors.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_safetensors(const std::uint8_t* data, std::size_t size) {
  const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  try {
    const SafetensorsFile file("/proc/self/fd/" + std::to_string(fd));
    for (const SafetensorsEntry& entry : file.entries()) (void)file.find(entry.name);
  } catch (const std::exception&) {  // SafetensorsError, FileError: the file and what is wrong
  }
  ::close(fd);
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_safetensors)
