// NvmeStore's transfers: a request is split into chunk pieces, one SQE each; at most queue_depth are
// in flight, SQEs are filled in a batch and submitted once; completions are reaped with peek/wait.
// Short transfers are retried for the remainder, EINTR/EAGAIN resubmitted, anything else fails the
// piece; the first failure cancels what is queued, drains what is in flight and is thrown.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "offload/io_uring_check.h"
#include "offload/nvme_store_state.h"

namespace ferry::offload {
namespace {

constexpr unsigned most_short_retries = 3;         // then the short transfer is an error
constexpr unsigned most_interrupted_retries = 64;  // EINTR / EAGAIN
constexpr long completion_timeout_seconds = 120;   // no completion for this long: the device hangs

const char* direction_name(IoDirection direction) { return direction == IoDirection::read ? "read" : "write"; }

std::string hexadecimal(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string clock_time(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string describe_errno(int error) {
  std::string text = std::strerror(error);
  if (error == ENOSPC || error == EDQUOT) text += " (the disk is full: free space or choose another --nvme-path)";
  if (error == EIO) text += " (the device reported an I/O error: check the drive, e.g. dmesg and smartctl)";
  return text;
}

// liburing's wait with a timeout reports -ETIME when it runs out; that is not an error of the call.
int absorb_timeout(int result, bool& timed_out) {
  timed_out = result == -ETIME;
  return timed_out ? 0 : result;
}

}  // namespace

void NvmeStore::State::validate_transfer(IoDirection direction, const StoreFile& file, std::uint64_t offset,
                                         const std::byte* buffer, std::size_t bytes) const {
  const std::string what = std::string(direction_name(direction)) + " of " + std::to_string(bytes) +
                           " bytes at offset " + std::to_string(offset) + " of '" + file.path + "'";
  const std::string needed = " (O_DIRECT in '" + options.directory + "' needs " + std::to_string(alignment) +
                             "-byte alignment; transfers start at multiples of chunk_bytes " +
                             std::to_string(options.chunk_bytes) + ")";
  if (offset > file.logical_bytes || bytes > file.logical_bytes - offset) {
    throw NvmeError(file.path, offset, 0,
                    what + " goes beyond the file's logical end at " + std::to_string(file.logical_bytes) + " bytes");
  }
  if (reinterpret_cast<std::uintptr_t>(buffer) % alignment != 0) {
    throw NvmeError(file.path, offset, 0, "misaligned buffer: the " + what + " uses a buffer not aligned to " +
                                              std::to_string(alignment) + " bytes" + needed);
  }
  if (offset % options.chunk_bytes != 0) {
    throw NvmeError(file.path, offset, 0, "misaligned offset: the " + what + " does not start at a multiple of " +
                                              std::to_string(options.chunk_bytes) + needed);
  }
  if (bytes % options.chunk_bytes != 0 && offset + bytes != file.logical_bytes) {
    throw NvmeError(file.path, offset, 0,
                    "misaligned length: the " + what + " is not a multiple of " + std::to_string(options.chunk_bytes) +
                        " and does not end at the file's logical end (" + std::to_string(file.logical_bytes) + ")" + needed);
  }
  if (direction == IoDirection::read) {
    struct stat attributes {};
    if (::fstat(file.descriptor.get(), &attributes) != 0) {
      const int error = errno;
      throw NvmeError(file.path, offset, error, "cannot stat '" + file.path + "': " + std::strerror(error));
    }
    const auto size_on_disk = static_cast<std::uint64_t>(attributes.st_size);
    if (size_on_disk < offset + bytes) {
      throw NvmeError(file.path, std::max(offset, size_on_disk), 0,
                      "'" + file.path + "' is truncated: it holds " + std::to_string(size_on_disk) + " bytes, but the " +
                          what + " needs " + std::to_string(offset + bytes) + " (it shrank behind the store's back)");
    }
  }
}

int NvmeStore::State::fixed_buffer_for(const std::byte* begin, std::size_t length) const {
  const auto address = reinterpret_cast<std::uintptr_t>(begin);
  auto after = std::upper_bound(registered_buffers.begin(), registered_buffers.end(), address,
                                [](std::uintptr_t value, const RegisteredBuffer& range) { return value < range.begin; });
  if (after == registered_buffers.begin()) return -1;
  const RegisteredBuffer& range = *(after - 1);
  return address + length <= range.end ? range.index : -1;
}

IoRequest NvmeStore::State::queue_transfer(IoDirection direction, FileId file_id, std::uint64_t offset,
                                           std::byte* buffer, std::size_t bytes) {
  return guarded([&] {
    file_at(file_id);  // throws for an id this store did not make
    StoreFile& file = files[file_id];
    validate_transfer(direction, file, offset, buffer, bytes);
    transfers_started = true;
    auto request = std::make_unique<TransferRequest>();
    request->id = next_request_++;
    for (std::size_t position = 0; position < bytes; position += options.chunk_bytes) {
      TransferPiece piece;
      piece.request = request.get();
      piece.file = file_id;
      piece.direction = direction;
      piece.buffer = buffer + position;
      piece.offset = offset + position;
      piece.logical_length = std::min(options.chunk_bytes, bytes - position);
      piece.length = round_up(piece.logical_length);
      piece.fixed_buffer = fixed_buffer_for(piece.buffer, piece.length);
      // A chunk being rewritten has no valid checksum until the write completes.
      if (direction == IoDirection::write) file.chunks[piece.offset / options.chunk_bytes] = ChunkRecord{};
      request->pieces.push_back(piece);
    }
    request->unfinished = request->pieces.size();
    for (TransferPiece& piece : request->pieces) pending_.push_back(&piece);
    const IoRequest id = request->id;
    requests_.emplace(id, std::move(request));
    if (in_flight_ >= options.queue_depth && !pending_.empty()) reap(false);  // make room without waiting
    fill_and_submit();
    refuse_if_failed();
    return id;
  });
}

void NvmeStore::State::fill_and_submit() {
  unsigned prepared = 0;
  while (in_flight_ < options.queue_depth && !pending_.empty() && !failure) {
    TransferPiece& piece = *pending_.front();
    pending_.pop_front();
    const StoreFile& file = files[piece.file];
    std::size_t length = piece.length - piece.done;
    const std::uint64_t offset = piece.offset + piece.done;
    if (fault_injector) {
      if (const std::optional<IoFault> fault = fault_injector(piece.direction, file.path, offset, length)) {
        if (fault->error_number != 0) {
          injected_completions_.emplace_back(&piece, -fault->error_number);
          continue;
        }
        // O_DIRECT lengths stay aligned, so the shortfall is rounded up to the alignment.
        length -= std::min(length, round_up(fault->short_by));
      }
    }
    piece.submitted = length;
    if (length == 0) {
      injected_completions_.emplace_back(&piece, 0);
      continue;
    }
    io_uring_sqe* entry = io_uring_get_sqe(ring_.get());
    if (entry == nullptr) {  // cannot happen with queue_depth entries, but never lose a piece
      pending_.push_front(&piece);
      break;
    }
    std::byte* address = piece.buffer + piece.done;
    const auto slot = static_cast<int>(piece.file);
    const auto count = static_cast<unsigned>(length);
    if (piece.direction == IoDirection::read) {
      if (piece.fixed_buffer >= 0) {
        io_uring_prep_read_fixed(entry, slot, address, count, offset, piece.fixed_buffer);
      } else {
        io_uring_prep_read(entry, slot, address, count, offset);
      }
    } else {
      if (piece.fixed_buffer >= 0) {
        io_uring_prep_write_fixed(entry, slot, address, count, offset, piece.fixed_buffer);
      } else {
        io_uring_prep_write(entry, slot, address, count, offset);
      }
    }
    io_uring_sqe_set_flags(entry, IOSQE_FIXED_FILE);
    io_uring_sqe_set_data(entry, &piece);
    ++in_flight_;
    ++prepared;
  }
  if (prepared == 0) return;
  try {
    FERRY_IO_URING_CHECK(io_uring_submit(ring_.get()), options.directory);
  } catch (const NvmeError&) {
    in_flight_ -= prepared;  // nothing was consumed: no completion will come for them
    throw;
  }
}

std::size_t NvmeStore::State::reap(bool block) {
  // Injected faults complete without the kernel.
  std::vector<std::pair<TransferPiece*, int>> completions;
  completions.swap(injected_completions_);
  if (in_flight_ > 0) {
    io_uring_cqe* completion = nullptr;
    if (io_uring_peek_cqe(ring_.get(), &completion) != 0) {
      if (!block || !completions.empty()) {
        // With deferred task work, completions are posted only when this thread enters the kernel.
        if (ring_.defers_task_work()) FERRY_IO_URING_CHECK(io_uring_get_events(ring_.get()), options.directory);
      } else {
        bool timed_out = false;
        __kernel_timespec timeout{};
        timeout.tv_sec = completion_timeout_seconds;
        FERRY_IO_URING_CHECK(absorb_timeout(io_uring_wait_cqe_timeout(ring_.get(), &completion, &timeout), timed_out),
                             options.directory);
        if (timed_out) {
          throw NvmeError(options.directory, 0, ETIMEDOUT,
                          "no transfer completed in " + std::to_string(completion_timeout_seconds) + " s with " +
                              std::to_string(in_flight_) + " in flight in '" + options.directory +
                              "': the device does not answer (check dmesg)");
        }
      }
    }
    while (io_uring_peek_cqe(ring_.get(), &completion) == 0 && completion != nullptr) {
      completions.emplace_back(static_cast<TransferPiece*>(io_uring_cqe_get_data(completion)), completion->res);
      io_uring_cqe_seen(ring_.get(), completion);
      --in_flight_;
    }
  }
  if (completions.empty()) return 0;
  // The freed slots go back to the device before the CPU works on checksums, so the queue stays full.
  try {
    fill_and_submit();
  } catch (const NvmeError&) {
    for (const auto& [piece, result] : completions) complete(*piece, result);
    throw;
  }
  for (const auto& [piece, result] : completions) complete(*piece, result);
  return completions.size();
}

void NvmeStore::State::complete(TransferPiece& piece, int result) {
  const StoreFile& file = files[piece.file];
  const char* direction = direction_name(piece.direction);
  const std::uint64_t offset = piece.offset + piece.done;
  if (result < 0) {
    const int error = -result;
    if ((error == EINTR || error == EAGAIN) && piece.interrupted_retries < most_interrupted_retries) {
      ++piece.interrupted_retries;
      pending_.push_front(&piece);
      return;
    }
    fail(piece, NvmeError(file.path, offset, error,
                          std::string(direction) + " of " + std::to_string(piece.length - piece.done) +
                              " bytes at offset " + std::to_string(offset) + " of '" + file.path +
                              "' failed: " + describe_errno(error)));
    return;
  }
  const auto moved = static_cast<std::size_t>(result);
  piece.done += moved;
  if (piece.done >= piece.length) {
    finish(piece);
    return;
  }
  if (piece.direction == IoDirection::read && moved == 0 && piece.submitted > 0) {
    // End of file. Past the logical end (an outside file not padded) the padding reads as zeros.
    if (piece.done >= piece.logical_length) {
      std::memset(piece.buffer + piece.done, 0, piece.length - piece.done);
      piece.done = piece.length;
      finish(piece);
      return;
    }
    struct stat attributes {};
    const bool known = ::fstat(file.descriptor.get(), &attributes) == 0;
    fail(piece, NvmeError(file.path, offset, 0,
                          "'" + file.path + "' is truncated: the read at offset " + std::to_string(offset) +
                              " found the end of the file" +
                              (known ? " at " + std::to_string(attributes.st_size) + " bytes" : std::string()) +
                              " (it shrank behind the store's back)"));
    return;
  }
  if (++piece.short_transfers > most_short_retries) {
    fail(piece, NvmeError(file.path, piece.offset, 0,
                          std::string("short ") + direction + ": " + std::to_string(piece.done) + " of " +
                              std::to_string(piece.length) + " bytes at offset " + std::to_string(piece.offset) +
                              " of " + file.path + " (after " + std::to_string(most_short_retries) + " retries)"));
    return;
  }
  pending_.push_front(&piece);  // a short transfer is legal: move the remainder
}

void NvmeStore::State::finish(TransferPiece& piece) {
  StoreFile& file = files[piece.file];
  ChunkRecord& record = file.chunks[piece.offset / options.chunk_bytes];
  const std::uint64_t checksum = chunk_checksum(piece.buffer, piece.logical_length);
  if (piece.direction == IoDirection::write) {
    record = ChunkRecord{checksum, piece.request->id, std::chrono::system_clock::now()};
  } else if (record.written_by == 0) {
    fail(piece, NvmeError(file.path, piece.offset, 0,
                          "no checksum for '" + file.path + "' at offset " + std::to_string(piece.offset) +
                              ": that chunk was never written through this store, so its data cannot be verified"));
    return;
  } else if (checksum != record.checksum) {
    fail(piece, NvmeError(file.path, piece.offset, 0,
                          "checksum mismatch in " + file.path + " at offset " + std::to_string(piece.offset) +
                              " (chunk written at " + clock_time(record.written_at) + " by request " +
                              std::to_string(record.written_by) + "; xxh64 of its " +
                              std::to_string(piece.logical_length) + " bytes was " + hexadecimal(record.checksum) +
                              ", read back " + hexadecimal(checksum) + "): the data on disk changed"));
    return;
  }
  --piece.request->unfinished;
}

void NvmeStore::State::fail(TransferPiece& piece, const NvmeError& error) {
  --piece.request->unfinished;
  record_failure(error);
}

void NvmeStore::State::record_failure(const NvmeError& error) {
  if (!failure) failure = error;
  // Nothing more is submitted: queued pieces are dropped; what is in flight still completes.
  for (TransferPiece* piece : pending_) --piece->request->unfinished;
  pending_.clear();
}

void NvmeStore::State::refuse_if_failed() {
  if (!failure) return;
  if (!failure_reported) {
    failure_reported = true;
    throw *failure;
  }
  throw NvmeError(failure->path(), failure->offset(), failure->error_number(),
                  std::string("the NVMe store refuses work after an earlier failure: ") + failure->what());
}

template <typename Done>
void NvmeStore::State::progress_until(Done&& done) {
  while (!done() && !failure) {
    fill_and_submit();
    if (in_flight_ == 0 && injected_completions_.empty()) {
      if (done()) break;
      throw NvmeError(options.directory, 0, 0, "internal error: a transfer waits with nothing in flight");
    }
    reap(true);
  }
  if (failure) {
    drain_quietly();
    refuse_if_failed();
  }
}

void NvmeStore::State::wait(IoRequest request) {
  guarded([&] {
    const auto found = requests_.find(request);
    if (found == requests_.end()) {
      throw NvmeError(options.directory, 0, 0,
                      "unknown request " + std::to_string(request) + " (never issued, or already waited for)");
    }
    TransferRequest& transfer = *found->second;
    progress_until([&] { return transfer.unfinished == 0; });
    requests_.erase(found);
  });
}

void NvmeStore::State::wait_all() {
  guarded([&] {
    quiesce();
    requests_.clear();
  });
}

void NvmeStore::State::quiesce() {
  progress_until([&] { return pending_.empty() && in_flight_ == 0 && injected_completions_.empty(); });
}

void NvmeStore::State::drain_quietly() noexcept {
  pending_.clear();
  try {
    while (in_flight_ > 0 || !injected_completions_.empty()) reap(true);
  } catch (...) {
    // The ring itself failed or the device hangs: nothing more can be waited for.
    in_flight_ = 0;
    injected_completions_.clear();
  }
}

}  // namespace ferry::offload
