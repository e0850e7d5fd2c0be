#include "engine/core/file_hash.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/atomic_file.h"
#include "engine/core/xxhash64.h"

namespace ferry {

std::uint64_t xxhash64_of_file(const std::string& path) {
  const std::uint64_t size = regular_file_size(path);
  if (size == 0) return xxhash64(nullptr, 0);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);
  if (mapped == MAP_FAILED) throw FileError(path, 0, std::string("cannot map it to read: ") + std::strerror(error));
  ::madvise(mapped, size, MADV_SEQUENTIAL);
  const std::uint64_t hash = xxhash64(mapped, size);
  ::munmap(mapped, size);
  return hash;
}

}  // namespace ferry
