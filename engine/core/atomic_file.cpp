#include "engine/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ferry {
namespace {

std::string describe_errno(int error) {
  if (error == ENOSPC) return std::string(std::strerror(error)) + " (the disk is full: free space or choose another directory)";
  if (error == EDQUOT) return std::string(std::strerror(error)) + " (disk quota exceeded)";
  return std::strerror(error);
}

}  // namespace

FileError::FileError(const std::string& path, std::uint64_t offset, const std::string& what)
    : std::runtime_error("'" + path + "' (offset " + std::to_string(offset) + "): " + what), path_(path), offset_(offset) {}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temporary_path_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temporary_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FileError(path_, 0, "cannot create it" + through_temporary() + ": " + describe_errno(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temporary_path_.c_str());
  }
}

std::string AtomicFileWriter::through_temporary() const { return " (through its temporary file '" + temporary_path_ + "')"; }

void AtomicFileWriter::write(const void* data, std::size_t bytes) {
  if (fd_ < 0) throw FileError(path_, offset_, "write after commit");
  const char* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t result = ::write(fd_, cursor, bytes);
    if (result < 0) {
      if (errno == EINTR) continue;
      throw FileError(path_, offset_, "write of " + std::to_string(bytes) + " bytes failed" + through_temporary() + ": " + describe_errno(errno));
    }
    cursor += result;
    bytes -= static_cast<std::size_t>(result);
    offset_ += static_cast<std::uint64_t>(result);
  }
}

void AtomicFileWriter::sync() {
  if (fd_ < 0) throw FileError(path_, offset_, "sync after commit");
  if (::fsync(fd_) != 0) throw FileError(path_, offset_, "fsync failed" + through_temporary() + ": " + describe_errno(errno));
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw FileError(path_, offset_, "commit twice");
  if (::fsync(fd_) != 0) throw FileError(path_, offset_, "fsync failed" + through_temporary() + ": " + describe_errno(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary_path_.c_str());
    throw FileError(path_, offset_, "close failed" + through_temporary() + ": " + describe_errno(error));
  }
  if (std::rename(temporary_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary_path_.c_str());
    throw FileError(path_, 0, "cannot rename '" + temporary_path_ + "' over it: " + describe_errno(error));
  }
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFileWriter writer(path);
  writer.write(contents);
  writer.commit();
}

std::uint64_t regular_file_size(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw FileError(path, 0, "cannot open: " + describe_errno(errno));
  if (S_ISDIR(info.st_mode)) throw FileError(path, 0, "is a directory, not a file");
  if (!S_ISREG(info.st_mode)) throw FileError(path, 0, "is not a regular file (a device, pipe or socket): ferry reads files");
  return static_cast<std::uint64_t>(info.st_size);
}

std::string read_text_file(const std::string& path) {
  const std::uint64_t size = regular_file_size(path);
  if (size > kMaxTextFileBytes) {
    throw FileError(path, 0, "is " + std::to_string(size) + " bytes, more than the " + std::to_string(kMaxTextFileBytes) +
                                 " ferry reads from a text or JSON file");
  }
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw FileError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) throw FileError(path, 0, "read failed");
  return text.str();
}

namespace {

// `directory` exists, is a directory and this process may create files in it.
void require_writable_directory(const std::filesystem::path& directory, const std::string& path, const std::string& flag) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    throw std::invalid_argument(flag + " '" + path + "': '" + directory.string() + "' is not a directory");
  }
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    throw std::invalid_argument(flag + " '" + path + "': the directory '" + directory.string() + "' is not writable (" +
                                describe_errno(errno) + "); choose another path");
  }
}

}  // namespace

void check_output_file(const std::string& path, const std::string& flag) {
  const std::filesystem::path target(path);
  std::error_code error;
  if (std::filesystem::is_directory(target, error)) throw std::invalid_argument(flag + " '" + path + "' is a directory: give a file path");
  const std::filesystem::path parent = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::exists(parent, error)) {
    throw std::invalid_argument(flag + " '" + path + "': its directory '" + parent.string() + "' does not exist; create it first");
  }
  require_writable_directory(parent, path, flag);
}

void check_output_directory(const std::string& path, const std::string& flag) {
  std::filesystem::path nearest = std::filesystem::absolute(std::filesystem::path(path)).lexically_normal();
  std::error_code error;
  while (!std::filesystem::exists(nearest, error) && nearest.has_parent_path() && nearest != nearest.parent_path()) nearest = nearest.parent_path();
  require_writable_directory(nearest, path, flag);
}

void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw FileError(directory, 0, "cannot open directory: " + describe_errno(errno));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0 && error != EINVAL) throw FileError(directory, 0, "fsync of directory failed: " + describe_errno(error));
}

}  // namespace ferry
