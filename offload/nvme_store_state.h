// NvmeStore::State, internal to the store: its files with their per-chunk checksums, the io_uring
// ring, the transfers in flight (split into chunk-sized pieces) and the first failure, after which
// the store refuses work. Files are in nvme_store_files.cpp, transfers in nvme_store_transfers.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "offload/file_descriptor.h"
#include "offload/io_uring_ring.h"
#include "offload/nvme_store.h"

namespace ferry::offload {

// What the store knows about one chunk of a file: the checksum of its logical bytes at the last write
// that completed. written_by == 0: never written through this store, so a read has nothing to check.
struct ChunkRecord {
  std::uint64_t checksum = 0;
  IoRequest written_by = 0;
  std::chrono::system_clock::time_point written_at{};
};

struct StoreFile {
  std::string name;
  std::string path;
  FileDescriptor descriptor;
  std::uint64_t logical_bytes = 0;
  std::uint64_t padded_bytes = 0;  // logical_bytes rounded up to the alignment: the size on disk
  std::vector<ChunkRecord> chunks;
};

struct TransferRequest;

// One chunk of a transfer: one SQE (again for the remainder after a short transfer).
struct TransferPiece {
  TransferRequest* request = nullptr;
  FileId file = 0;
  IoDirection direction = IoDirection::read;
  std::byte* buffer = nullptr;
  std::uint64_t offset = 0;          // in the file, a multiple of chunk_bytes
  std::size_t length = 0;            // padded to the alignment
  std::size_t logical_length = 0;    // what the checksum covers
  std::size_t done = 0;              // bytes moved so far
  std::size_t submitted = 0;         // length of the SQE in flight
  int fixed_buffer = -1;             // registered buffer index, or -1
  unsigned short_transfers = 0;
  unsigned interrupted_retries = 0;  // EINTR / EAGAIN
};

struct TransferRequest {
  IoRequest id = 0;
  std::vector<TransferPiece> pieces;
  std::size_t unfinished = 0;
};

struct RegisteredBuffer {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  int index = 0;
};

struct NvmeStore::State {
  State(NvmeStoreOptions store_options, std::size_t direct_io_alignment);
  ~State();

  // Files (nvme_store_files.cpp).
  FileId create_file(const std::string& name, std::uint64_t bytes);
  FileId open_file(const std::string& name, std::uint64_t bytes);
  void register_buffers(std::span<const std::span<std::byte>> buffers);

  // Transfers (nvme_store_transfers.cpp).
  IoRequest queue_transfer(IoDirection direction, FileId file, std::uint64_t offset, std::byte* buffer,
                           std::size_t bytes);
  void wait(IoRequest request);
  void wait_all();

  // Failure: the first NvmeError of a transfer is kept; every later call throws.
  void refuse_if_failed();
  void record_failure(const NvmeError& error);
  // Runs `action`; an NvmeError it throws becomes the store's failure (in-flight I/O drained first).
  template <typename Action>
  auto guarded(Action&& action) {
    refuse_if_failed();
    try {
      return action();
    } catch (const NvmeError& error) {
      record_failure(error);
      drain_quietly();
      failure_reported = true;
      throw;
    }
  }

  std::size_t round_up(std::uint64_t bytes) const {
    return static_cast<std::size_t>((bytes + alignment - 1) / alignment * alignment);
  }
  const StoreFile& file_at(FileId file) const;

  NvmeStoreOptions options;
  std::size_t alignment;
  std::vector<StoreFile> files;  // indexed by FileId, which is also the registered file slot
  std::unordered_map<std::string, FileId> file_ids;
  unsigned registered_file_slots = 0;
  std::vector<RegisteredBuffer> registered_buffers;  // sorted by begin
  bool buffers_registered = false;
  bool transfers_started = false;
  std::uint64_t bytes_on_disk = 0;
  FaultInjector fault_injector;

  std::optional<NvmeError> failure;
  bool failure_reported = false;

 private:
  // Files.
  FileId install_file(const std::string& name, const std::string& path, FileDescriptor descriptor,
                      std::uint64_t logical_bytes);
  void ensure_file_slots(std::size_t count);

  // Transfers.
  void validate_transfer(IoDirection direction, const StoreFile& file, std::uint64_t offset, const std::byte* buffer,
                         std::size_t bytes) const;
  int fixed_buffer_for(const std::byte* begin, std::size_t length) const;
  void fill_and_submit();
  std::size_t reap(bool block);
  void complete(TransferPiece& piece, int result);
  void finish(TransferPiece& piece);
  void fail(TransferPiece& piece, const NvmeError& error);
  template <typename Done>
  void progress_until(Done&& done);
  void quiesce();
  void drain_quietly() noexcept;

  std::unordered_map<IoRequest, std::unique_ptr<TransferRequest>> requests_;
  IoRequest next_request_ = 1;
  std::deque<TransferPiece*> pending_;
  std::vector<std::pair<TransferPiece*, int>> injected_completions_;
  unsigned in_flight_ = 0;

  IoUringRing ring_;  // last: destroyed first, before the files' descriptors close
};

}  // namespace ferry::offload
