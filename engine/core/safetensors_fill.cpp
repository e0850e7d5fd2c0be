#include "engine/core/safetensors_fill.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/atomic_file.h"

namespace ferry {
namespace {

void write_exactly(int fd, const void* source, std::uint64_t bytes, std::uint64_t offset, const std::string& path) {
  const auto* cursor = static_cast<const char*>(source);
  while (bytes > 0) {
    const ssize_t put = ::pwrite(fd, cursor, bytes, static_cast<off_t>(offset));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw FileError(path, offset, std::string("write failed: ") + std::strerror(errno));
    cursor += put;
    bytes -= static_cast<std::uint64_t>(put);
    offset += static_cast<std::uint64_t>(put);
  }
}

}  // namespace

void create_sized_safetensors(const std::string& path, std::vector<SafetensorsEntry> entries,
                              const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header(entries, metadata);
  const std::uint64_t data_bytes = entries.empty() ? 0 : entries.back().end;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw FileError(path, 0, std::string("cannot create: ") + std::strerror(errno));
  try {
    write_exactly(fd, header.data(), header.size(), 0, path);
    const std::uint64_t size = header.size() + data_bytes;
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) throw FileError(path, size, std::string("cannot extend: ") + std::strerror(errno));
    if (::fsync(fd) != 0) throw FileError(path, 0, std::string("fsync failed: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  ::close(fd);
}

SafetensorsFiller::SafetensorsFiller(const std::string& path) : layout_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) throw FileError(path, 0, std::string("cannot open for writing: ") + std::strerror(errno));
}

SafetensorsFiller::~SafetensorsFiller() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFiller::write(const std::string& name, DType dtype, std::int64_t first, std::int64_t count, const void* data) {
  const SafetensorsEntry* entry = layout_.find(name);
  if (entry == nullptr) throw SafetensorsError("'" + layout_.path() + "' has no tensor '" + name + "' to write");
  if (entry->dtype != dtype) {
    throw SafetensorsError("'" + layout_.path() + "' tensor '" + name + "' is " + std::string(safetensors_dtype_name(entry->dtype)) +
                           ", not " + std::string(safetensors_dtype_name(dtype)));
  }
  const std::uint64_t at = safetensors_elements_offset(*entry, first, count, layout_.path());
  write_exactly(fd_, data, static_cast<std::uint64_t>(count) * dtype_size(dtype), layout_.data_offset() + at, layout_.path());
}

void SafetensorsFiller::sync() {
  if (::fsync(fd_) != 0) throw FileError(layout_.path(), 0, std::string("fsync failed: ") + std::strerror(errno));
}

}  // namespace ferry
