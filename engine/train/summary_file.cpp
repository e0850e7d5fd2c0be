#include "engine/train/summary_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace ferry {

void write_summary_file(const std::string& path, const nlohmann::json& summary) {
  const std::string temporary = path + ".tmp";
  const std::string text = summary.dump(2) + "\n";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write summary '" + temporary + "': " + std::strerror(errno));
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t result = ::write(fd, text.data() + written, text.size() - written);
    if (result < 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      throw std::runtime_error("writing summary '" + temporary + "' failed at offset " + std::to_string(written) +
                               ": " + std::strerror(error));
    }
    written += static_cast<std::size_t>(result);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw std::runtime_error("cannot flush summary '" + temporary + "': " + std::strerror(error));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename '" + temporary + "' to '" + path + "': " + std::strerror(errno));
  }
}

}  // namespace ferry
