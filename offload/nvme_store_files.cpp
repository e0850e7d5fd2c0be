// NvmeStore's files: creation with the space reserved up front (ftruncate to the padded size, then
// fallocate), opening existing files with a size check, the io_uring file table (sparse, grown by
// doubling) and registered buffers.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "offload/direct_io_alignment.h"
#include "offload/io_uring_check.h"
#include "offload/nvme_store_state.h"

namespace ferry::offload {
namespace {

constexpr unsigned initial_file_slots = 64;
constexpr std::size_t largest_registered_buffer = std::size_t{1} << 30;  // the kernel's limit per buffer
constexpr std::size_t most_registered_buffers = 1024;                    // UIO_MAXIOV

void validate_name(const std::string& directory, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    throw NvmeError(directory, 0, 0, "file name '" + name + "' is not a plain file name inside '" + directory + "'");
  }
}

std::string describe_open_failure(const std::string& directory, int error) {
  if (error == EINVAL) return direct_io_unsupported_message(directory);
  if (error == ENOSPC) return std::string(std::strerror(error)) + ": free space or choose another --nvme-path";
  if (error == EACCES || error == EROFS) {
    return std::string(std::strerror(error)) + ": choose another --nvme-path the process can write to";
  }
  return std::strerror(error);
}

}  // namespace

FileId NvmeStore::State::create_file(const std::string& name, std::uint64_t bytes) {
  refuse_if_failed();
  validate_name(options.directory, name);
  const std::string path = options.directory + "/" + name;
  const auto existing = file_ids.find(name);
  if (existing != file_ids.end()) guarded([&] { quiesce(); });  // nothing may be in flight on the old file

  const bool existed = ::access(path.c_str(), F_OK) == 0;
  FileDescriptor descriptor(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600));
  if (!descriptor.valid()) {
    const int error = errno;
    throw NvmeError(path, 0, error, "cannot create '" + path + "': " + describe_open_failure(options.directory, error));
  }
  const std::uint64_t padded = round_up(bytes);
  // A refused reservation leaves no half file behind: a new file goes, a truncated one stays empty.
  const auto refuse = [&](const char* step, int error) {
    if (existed) {
      if (::ftruncate(descriptor.get(), 0) != 0) { /* the error below is the one to report */ }
      if (existing != file_ids.end()) {
        for (ChunkRecord& chunk : files[existing->second].chunks) chunk = ChunkRecord{};
      }
    } else {
      ::unlink(path.c_str());
    }
    std::string fix;
    if (error == ENOSPC || error == EDQUOT || error == EFBIG) {
      fix = ": free at least " + std::to_string(padded) + " bytes on the file system of '" + options.directory +
            "' or choose another --nvme-path with room";
    } else if (error == EOPNOTSUPP) {
      fix = ": the file system cannot reserve space; choose another --nvme-path (ext4 or xfs)";
    }
    throw NvmeError(path, 0, error,
                    std::string("cannot reserve ") + std::to_string(padded) + " bytes (" + std::to_string(bytes) +
                        " logical, padded to " + std::to_string(alignment) + "-byte alignment) for '" + path +
                        "': " + step + " failed: " + std::strerror(error) + fix);
  };
  if (const std::size_t needed = direct_io_alignment(descriptor.get()); needed > alignment) {
    if (!existed) ::unlink(path.c_str());
    throw NvmeError(path, 0, EINVAL,
                    "'" + path + "' needs O_DIRECT alignment " + std::to_string(needed) + ", more than the " +
                        std::to_string(alignment) + " found for '" + options.directory + "'");
  }
  if (::ftruncate(descriptor.get(), static_cast<off_t>(padded)) != 0) refuse("ftruncate", errno);
  if (padded > 0 && ::fallocate(descriptor.get(), 0, 0, static_cast<off_t>(padded)) != 0) refuse("fallocate", errno);
  return install_file(name, path, std::move(descriptor), bytes);
}

FileId NvmeStore::State::open_file(const std::string& name, std::uint64_t bytes) {
  refuse_if_failed();
  validate_name(options.directory, name);
  const std::string path = options.directory + "/" + name;
  if (const auto existing = file_ids.find(name); existing != file_ids.end()) {
    if (bytes > files[existing->second].logical_bytes) {
      throw NvmeError(path, 0, 0,
                      "'" + path + "' is open in this store with " + std::to_string(files[existing->second].logical_bytes) +
                          " bytes, fewer than the " + std::to_string(bytes) + " asked");
    }
    return existing->second;
  }
  FileDescriptor descriptor(::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC));
  if (!descriptor.valid()) {
    const int error = errno;
    if (error == ENOENT) {
      throw NvmeError(path, 0, error, "'" + path + "' does not exist (was it written to this --nvme-path?)");
    }
    throw NvmeError(path, 0, error, "cannot open '" + path + "': " + describe_open_failure(options.directory, error));
  }
  struct stat attributes {};
  if (::fstat(descriptor.get(), &attributes) != 0) {
    const int error = errno;
    throw NvmeError(path, 0, error, "cannot stat '" + path + "': " + std::strerror(error));
  }
  const auto size_on_disk = static_cast<std::uint64_t>(attributes.st_size);
  if (size_on_disk < bytes) {
    throw NvmeError(path, size_on_disk, 0,
                    "'" + path + "' holds " + std::to_string(size_on_disk) + " bytes, fewer than the " +
                        std::to_string(bytes) + " asked: it is truncated (or not the file expected); it ends at offset " +
                        std::to_string(size_on_disk));
  }
  if (direct_io_alignment(descriptor.get()) > alignment) {
    throw NvmeError(path, 0, EINVAL, "'" + path + "' needs a larger O_DIRECT alignment than its directory");
  }
  return install_file(name, path, std::move(descriptor), bytes);
}

FileId NvmeStore::State::install_file(const std::string& name, const std::string& path, FileDescriptor descriptor,
                                      std::uint64_t logical_bytes) {
  return guarded([&] {
    const auto existing = file_ids.find(name);
    const FileId id = existing != file_ids.end() ? existing->second : static_cast<FileId>(files.size());
    if (existing == file_ids.end()) {
      ensure_file_slots(std::size_t{id} + 1);
      files.emplace_back();
    }
    int raw_descriptor = descriptor.get();
    FERRY_IO_URING_CHECK(io_uring_register_files_update(ring_.get(), id, &raw_descriptor, 1), path);
    StoreFile& file = files[id];
    bytes_on_disk -= file.padded_bytes;
    file.name = name;
    file.path = path;
    file.descriptor = std::move(descriptor);
    file.logical_bytes = logical_bytes;
    file.padded_bytes = round_up(logical_bytes);
    const std::uint64_t chunk_count = (logical_bytes + options.chunk_bytes - 1) / options.chunk_bytes;
    file.chunks.assign(static_cast<std::size_t>(chunk_count), ChunkRecord{});
    bytes_on_disk += file.padded_bytes;
    file_ids[name] = id;
    return id;
  });
}

void NvmeStore::State::ensure_file_slots(std::size_t count) {
  if (count <= registered_file_slots) return;
  rlimit open_files{};
  ::getrlimit(RLIMIT_NOFILE, &open_files);
  const std::size_t limit = std::min<std::size_t>(open_files.rlim_cur, 1u << 20);
  std::size_t slots = std::max<std::size_t>({initial_file_slots, std::size_t{registered_file_slots} * 2, count});
  slots = std::min(slots, limit);
  if (slots < count) {
    throw NvmeError(options.directory, 0, EMFILE,
                    "the store needs " + std::to_string(count) + " open files, more than the limit of " +
                        std::to_string(limit) + ": raise it with ulimit -n");
  }
  if (registered_file_slots > 0) {
    quiesce();  // the table is replaced: nothing may be in flight
    FERRY_IO_URING_CHECK(io_uring_unregister_files(ring_.get()), options.directory);
    registered_file_slots = 0;
  }
  FERRY_IO_URING_CHECK(io_uring_register_files_sparse(ring_.get(), static_cast<unsigned>(slots)), options.directory);
  registered_file_slots = static_cast<unsigned>(slots);
  std::vector<int> descriptors;
  for (const StoreFile& file : files) descriptors.push_back(file.descriptor.get());
  if (!descriptors.empty()) {
    FERRY_IO_URING_CHECK(io_uring_register_files_update(ring_.get(), 0, descriptors.data(),
                                                        static_cast<unsigned>(descriptors.size())),
                         options.directory);
  }
}

void NvmeStore::State::register_buffers(std::span<const std::span<std::byte>> buffers) {
  guarded([&] {
    if (buffers_registered) throw NvmeError(options.directory, 0, 0, "register_buffers may be called once per store");
    if (transfers_started) {
      throw NvmeError(options.directory, 0, 0, "register_buffers must come before the first transfer");
    }
    buffers_registered = true;
    if (!options.register_buffers) return;
    std::vector<iovec> vectors;
    std::vector<RegisteredBuffer> ranges;
    for (const std::span<std::byte>& buffer : buffers) {
      const auto begin = reinterpret_cast<std::uintptr_t>(buffer.data());
      if (begin % alignment != 0) {
        throw NvmeError(options.directory, 0, 0,
                        "registered buffer at " + std::to_string(begin) + " is not aligned to " +
                            std::to_string(alignment) + " bytes, the O_DIRECT alignment of '" + options.directory + "'");
      }
      // The kernel takes at most 1 GiB per registered buffer: larger ones are registered in slices.
      for (std::size_t slice = 0; slice < buffer.size(); slice += largest_registered_buffer) {
        const std::size_t length = std::min(largest_registered_buffer, buffer.size() - slice);
        vectors.push_back(iovec{buffer.data() + slice, length});
        ranges.push_back(RegisteredBuffer{begin + slice, begin + slice + length, static_cast<int>(ranges.size())});
      }
    }
    if (vectors.empty()) return;
    if (vectors.size() > most_registered_buffers) {
      throw NvmeError(options.directory, 0, 0,
                      "at most " + std::to_string(most_registered_buffers) + " registered buffers (1 GiB slices) are possible");
    }
    try {
      FERRY_IO_URING_CHECK(io_uring_register_buffers(ring_.get(), vectors.data(), static_cast<unsigned>(vectors.size())),
                           options.directory);
    } catch (const NvmeError& error) {
      if (error.error_number() != ENOMEM) throw;
      throw NvmeError(error.path(), 0, ENOMEM,
                      std::string(error.what()) + " (raise the locked-memory limit, ulimit -l, or set register_buffers=false)");
    }
    std::sort(ranges.begin(), ranges.end(), [](const auto& left, const auto& right) { return left.begin < right.begin; });
    registered_buffers = std::move(ranges);
  });
}

const StoreFile& NvmeStore::State::file_at(FileId file) const {
  if (file >= files.size()) {
    throw NvmeError(options.directory, 0, 0, "file id " + std::to_string(file) + " was not made by this store");
  }
  return files[file];
}

}  // namespace ferry::offload
