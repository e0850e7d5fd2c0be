#include "engine/core/file_hash.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/core/atomic_file.h"
#include "engine/core/xxhash64.h"

namespace ferry {

std::uint64_t xxhash64_of_file(const std::string& path) {
  regular_file_size(path);  // throws unless a regular file
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  // A chunk at a time: the process holds 4 MiB of the file whatever its size (mapping it whole made a
  // checkpoint's save and load resident by the size of its largest file).
  constexpr std::size_t kChunkBytes = std::size_t{4} << 20;
  std::vector<unsigned char> chunk(kChunkBytes);
  Xxhash64Stream stream;
  std::uint64_t offset = 0;
  for (;;) {
    const ssize_t got = ::pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      throw FileError(path, offset, std::string("cannot read it: ") + std::strerror(error));
    }
    if (got == 0) break;
    stream.update(chunk.data(), static_cast<std::size_t>(got));
    offset += static_cast<std::uint64_t>(got);
  }
  ::close(fd);
  return stream.digest();
}

}  // namespace ferry
