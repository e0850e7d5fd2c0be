// NvmeStore's public face: options checked, the directory made and probed for O_DIRECT and its
// alignment, the ring set up with a sparse file table; every call refuses work after a failure.
// The state and its work live in nvme_store_state.h, nvme_store_files.cpp, nvme_store_transfers.cpp.
#include "offload/nvme_store.h"

#include <filesystem>
#include <system_error>

#include "offload/direct_io_alignment.h"
#include "offload/io_uring_check.h"
#include "offload/nvme_store_state.h"

namespace ferry::offload {
namespace {

constexpr unsigned largest_queue_depth = 4096;
constexpr std::size_t largest_chunk = std::size_t{1} << 30;

// Checks the options and makes the directory; returns the O_DIRECT alignment found there.
std::size_t prepare_directory(const NvmeStoreOptions& options) {
  if (options.directory.empty()) throw NvmeError("", 0, 0, "the NVMe store needs a directory (--nvme-path)");
  if (options.queue_depth == 0 || options.queue_depth > largest_queue_depth) {
    throw NvmeError(options.directory, 0, 0,
                    "queue depth " + std::to_string(options.queue_depth) + " is outside 1.." +
                        std::to_string(largest_queue_depth));
  }
  std::error_code error;
  std::filesystem::create_directories(options.directory, error);
  if (error) {
    throw NvmeError(options.directory, 0, error.value(),
                    "cannot make the directory '" + options.directory + "': " + error.message() +
                        " (choose another --nvme-path)");
  }
  const std::size_t alignment = probe_directory_alignment(options.directory);
  if (options.chunk_bytes == 0 || options.chunk_bytes % alignment != 0 || options.chunk_bytes > largest_chunk) {
    throw NvmeError(options.directory, 0, 0,
                    "chunk_bytes " + std::to_string(options.chunk_bytes) + " must be a multiple of " +
                        std::to_string(alignment) + " (the O_DIRECT alignment of '" + options.directory +
                        "') and at most 1 GiB");
  }
  return alignment;
}

}  // namespace

NvmeError::NvmeError(const std::string& path, std::uint64_t offset, int error_number, const std::string& what)
    : std::runtime_error(what), path_(path), offset_(offset), error_number_(error_number) {}

NvmeStore::State::State(NvmeStoreOptions store_options, std::size_t direct_io_alignment)
    : options(std::move(store_options)),
      alignment(direct_io_alignment),
      ring_(options.queue_depth, options.directory) {
  ensure_file_slots(1);
}

NvmeStore::State::~State() {
  // Queued writes still reach their files (their buffers are valid until wait, which never came);
  // after a failure only what the kernel holds is drained.
  if (!failure) {
    try {
      quiesce();
    } catch (const std::exception&) {
      // A destructor cannot report it; the store's files are suspect and the owner learns at the next read.
    }
  }
  drain_quietly();
  // Unregister before the ring goes (its destructor) and before the descriptors close (members after).
  if (!registered_buffers.empty()) io_uring_unregister_buffers(ring_.get());
  if (registered_file_slots > 0) io_uring_unregister_files(ring_.get());
}

NvmeStore::NvmeStore(NvmeStoreOptions options) {
  const std::size_t alignment = prepare_directory(options);
  state_ = std::make_unique<State>(std::move(options), alignment);
}

NvmeStore::~NvmeStore() = default;

std::size_t NvmeStore::alignment() const { return state_->alignment; }
std::size_t NvmeStore::chunk_bytes() const { return state_->options.chunk_bytes; }
const std::string& NvmeStore::directory() const { return state_->options.directory; }

FileId NvmeStore::create_file(const std::string& name, std::uint64_t bytes) { return state_->create_file(name, bytes); }
FileId NvmeStore::open_file(const std::string& name, std::uint64_t bytes) { return state_->open_file(name, bytes); }
std::string NvmeStore::path(FileId file) const { return state_->file_at(file).path; }

void NvmeStore::register_buffers(std::span<const std::span<std::byte>> buffers) { state_->register_buffers(buffers); }

IoRequest NvmeStore::write_async(FileId file, std::uint64_t offset, const void* buffer, std::size_t bytes) {
  // The store never writes into a write's buffer; the piece type holds one pointer for both directions.
  auto* bytes_pointer = const_cast<std::byte*>(static_cast<const std::byte*>(buffer));
  return state_->queue_transfer(IoDirection::write, file, offset, bytes_pointer, bytes);
}

IoRequest NvmeStore::read_async(FileId file, std::uint64_t offset, void* buffer, std::size_t bytes) {
  return state_->queue_transfer(IoDirection::read, file, offset, static_cast<std::byte*>(buffer), bytes);
}

void NvmeStore::wait(IoRequest request) { state_->wait(request); }
void NvmeStore::wait_all() { state_->wait_all(); }

std::uint64_t NvmeStore::bytes_on_disk() const { return state_->bytes_on_disk; }
void NvmeStore::set_fault_injector(FaultInjector injector) { state_->fault_injector = std::move(injector); }

}  // namespace ferry::offload
