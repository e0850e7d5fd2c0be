// Files that appear whole or not at all: AtomicFileWriter streams into a temporary file beside the
// target, and commit() fsyncs it, renames it over the target and fsyncs the directory. A writer that
// is destroyed without commit() removes its temporary file, so a failure never leaves a half file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ferry {

// An I/O failure with the file and the byte offset where it happened.
class FileError : public std::runtime_error {
 public:
  FileError(const std::string& path, std::uint64_t offset, const std::string& what);
  const std::string& path() const { return path_; }
  std::uint64_t offset() const { return offset_; }

 private:
  std::string path_;
  std::uint64_t offset_;
};

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Makes the temporary file durable (fsync) without publishing it.
  void sync();
  // Makes the file durable and visible under its final name.
  void commit();
  std::uint64_t bytes_written() const { return offset_; }

 private:
  std::string through_temporary() const;  // for errors, which name the user's path first

  std::string path_;
  std::string temporary_path_;
  int fd_ = -1;
  std::uint64_t offset_ = 0;
};

void write_file_atomically(const std::string& path, std::string_view contents);
// The size of `path`, which must be a regular file: a directory, a device such as /dev/zero (endless)
// or a pipe throws FileError naming it, before anything is read. Symbolic links are followed.
std::uint64_t regular_file_size(const std::string& path);
// The most bytes read_text_file reads: configs, trainer states and profiles are far smaller.
inline constexpr std::uint64_t kMaxTextFileBytes = std::uint64_t{1} << 30;
// Reads a whole (small) regular file; throws FileError naming it when it cannot, or when it is larger
// than kMaxTextFileBytes.
std::string read_text_file(const std::string& path);
// Checks, before a run starts, that `flag`'s output can be written at its end: `path` is not a
// directory and its directory exists and is writable (a file), or the nearest existing ancestor of
// `path` is a writable directory (a directory the run creates). Throws std::invalid_argument naming
// the flag, the path and the fix.
void check_output_file(const std::string& path, const std::string& flag);
void check_output_directory(const std::string& path, const std::string& flag);
// fsyncs a directory so renames and removals inside it are durable.
void sync_directory(const std::string& directory);

}  // namespace ferry
