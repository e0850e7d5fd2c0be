// NvmeStore: files of training state in a directory on an NVMe drive, moved with io_uring (liburing)
// and O_DIRECT at the file system's alignment (statx STATX_DIOALIGN, 4096 when unknown): registered
// buffers and files, batched submission up to a queue depth, a checksum per chunk kept at write and
// verified at read. Every failure (ENOSPC, EIO, a short transfer, a missing or truncated file) throws
// NvmeError naming the file and the offset; after one, the store refuses further work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/core/xxhash64.h"

namespace ferry::offload {

class NvmeError : public std::runtime_error {
 public:
  NvmeError(const std::string& path, std::uint64_t offset, int error_number, const std::string& what);
  const std::string& path() const { return path_; }
  std::uint64_t offset() const { return offset_; }
  int error_number() const { return error_number_; }  // errno, or 0 (checksum, short transfer, misuse)

 private:
  std::string path_;
  std::uint64_t offset_;
  int error_number_;
};

enum class IoDirection : unsigned char { read, write };

// What a fault-injection hook makes of one transfer: fail it with an errno, or move fewer bytes.
struct IoFault {
  int error_number = 0;       // e.g. ENOSPC, EIO
  std::size_t short_by = 0;   // bytes the transfer falls short
};
// Asked before each transfer (tests only): return a fault to inject, or nullopt.
using FaultInjector = std::function<std::optional<IoFault>(IoDirection, const std::string& path, std::uint64_t offset,
                                                           std::size_t bytes)>;

struct NvmeStoreOptions {
  std::string directory;                           // created when missing
  unsigned queue_depth = 32;                       // transfers in flight at most
  std::size_t chunk_bytes = std::size_t{1} << 20;  // one transfer and one checksum per chunk
  bool register_buffers = true;                    // use fixed buffers for registered ranges
};

// A store in `directory` moving `chunk_bytes` per transfer, `queue_depth` at once (buffers registered).
inline NvmeStoreOptions nvme_store_options(std::string directory, unsigned queue_depth, std::size_t chunk_bytes) {
  NvmeStoreOptions options;
  options.directory = std::move(directory);
  options.queue_depth = queue_depth;
  options.chunk_bytes = chunk_bytes;
  return options;
}

using FileId = std::uint32_t;
using IoRequest = std::uint64_t;

class NvmeStore {
 public:
  // Throws NvmeError when the directory cannot be made or io_uring cannot be set up (the message names
  // the fix: another --nvme-path, or a kernel with io_uring enabled).
  explicit NvmeStore(NvmeStoreOptions options);
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Buffer address, file offset and transfer length alignment O_DIRECT needs in this directory.
  std::size_t alignment() const;
  std::size_t chunk_bytes() const;
  const std::string& directory() const;

  // Creates (or truncates) `name` in the directory with `bytes` logical bytes, its space reserved with
  // fallocate so a full disk shows here rather than in the middle of a step.
  FileId create_file(const std::string& name, std::uint64_t bytes);
  // Opens an existing file; throws when it is missing or shorter than `bytes`.
  FileId open_file(const std::string& name, std::uint64_t bytes);
  std::string path(FileId file) const;

  // Registers host buffers (aligned to alignment()) as io_uring fixed buffers; transfers whose memory
  // lies inside one use them. Call before the first transfer; at most once.
  void register_buffers(std::span<const std::span<std::byte>> buffers);

  // Queues a transfer of `bytes` at `offset`. offset must be a multiple of chunk_bytes(); bytes must be
  // too unless the transfer ends at the file's logical end, whose tail is padded to alignment() (the
  // buffer must have room up to the padded length; a read fills the padding with what is on disk).
  // The buffer must stay valid until wait() returns for the request.
  IoRequest write_async(FileId file, std::uint64_t offset, const void* buffer, std::size_t bytes);
  IoRequest read_async(FileId file, std::uint64_t offset, void* buffer, std::size_t bytes);
  // Submits what is queued, waits until `request` is complete and, for reads, verifies every chunk's
  // checksum. Throws NvmeError for the first failed transfer of the request.
  void wait(IoRequest request);
  void wait_all();

  // Bytes of file space the store's files hold.
  std::uint64_t bytes_on_disk() const;
  void set_fault_injector(FaultInjector injector);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The chunk checksum: XXH64 of the logical bytes of the chunk.
inline std::uint64_t chunk_checksum(const void* data, std::size_t bytes) { return xxhash64(data, bytes); }

}  // namespace ferry::offload
