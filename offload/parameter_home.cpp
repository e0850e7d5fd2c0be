#include "offload/parameter_home.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/byte_size.h"
#include "offload/host_buffer.h"
#include "offload/nvme_store.h"

namespace ferry::offload {
namespace {

void check_range(const ParameterHome& home, ElementRange range) {
  if (range.begin < 0 || range.count < 0 || range.begin + range.count > home.elements()) {
    throw std::out_of_range("elements [" + std::to_string(range.begin) + ", " + std::to_string(range.begin + range.count) +
                            ") of a parameter partition of " + std::to_string(home.elements()));
  }
}

class HostParameterHome final : public ParameterHome {
 public:
  HostParameterHome(Device& device, std::int64_t elements, DType dtype, PinnedHostAllocator* pinned)
      : ParameterHome(elements, dtype), device_(device),
        values_(pinned, static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)) * dtype_size(dtype), MemoryCategory::parameters) {}
  std::string name() const override { return "cpu"; }
  void fetch(ElementRange range, void* destination) override {
    check_range(*this, range);
    const std::size_t element = dtype_size(dtype());
    device_.copy(destination, values_.as<std::byte>() + static_cast<std::size_t>(range.begin) * element,
                 static_cast<std::size_t>(range.count) * element, CopyKind::host_to_device, device_.default_stream());
  }
  void store(ElementRange range, const void* values) override {
    check_range(*this, range);
    if (range.begin == 0) device_.synchronize(device_.default_stream());  // no fetch still reads the old values
    const std::size_t element = dtype_size(dtype());
    std::memcpy(values_.as<std::byte>() + static_cast<std::size_t>(range.begin) * element, values, static_cast<std::size_t>(range.count) * element);
  }
  void flush() override {}
  std::int64_t host_bytes() const override { return static_cast<std::int64_t>(values_.bytes()); }

 private:
  Device& device_;
  HostBuffer values_;
};

class DryParameterHome final : public ParameterHome {
 public:
  DryParameterHome(std::int64_t elements, DType dtype) : ParameterHome(elements, dtype) {}
  std::string name() const override { return "dry run"; }
  void fetch(ElementRange range, void*) override { check_range(*this, range); }
  void store(ElementRange range, const void*) override { check_range(*this, range); }
  void flush() override {}
  std::int64_t host_bytes() const override { return 0; }
};

// The file holds the partition's bytes end to end. A transfer covers whole I/O chunks (the last may end
// at the file's end), at most one buffer's worth; a range's pieces start at its first chunk.
class NvmeParameterHome final : public ParameterHome {
 public:
  NvmeParameterHome(Device& device, NvmeStore& store, std::int64_t elements, DType dtype, int buffer_count, std::size_t buffer_bytes,
                    PinnedHostAllocator* pinned)
      : ParameterHome(elements, dtype), device_(device), store_(store),
        bytes_(static_cast<std::uint64_t>(elements) * dtype_size(dtype)) {
    const std::size_t chunk = store.chunk_bytes();
    if (buffer_count < 1) throw std::invalid_argument("the NVMe parameter home needs at least 1 buffer, got " + std::to_string(buffer_count));
    if (buffer_bytes < chunk) {
      throw std::invalid_argument("--offload-param-buffer-size " + format_bytes(buffer_bytes) + " is less than one " + format_bytes(chunk) +
                                  " I/O chunk (aio.block_size): give at least " + format_bytes(chunk));
    }
    // Whole chunks, and no more than the partition's: a buffer past its end would never be filled.
    buffer_bytes_ = std::min(buffer_bytes / chunk * chunk, std::max<std::size_t>((bytes_ + chunk - 1) / chunk * chunk, chunk));
    if (bytes_ > 0) {  // a rank that owns no element has no file
      file_ = store.create_file("parameters.bin", bytes_);
      std::error_code ignored;  // unnamed at once: nothing is left behind, whatever ends the run
      std::filesystem::remove(store.path(file_), ignored);
    }
    std::vector<std::span<std::byte>> spans;
    for (int i = 0; i < buffer_count; ++i) {
      buffers_.emplace_back(pinned, buffer_bytes_, MemoryCategory::parameters, store.alignment());
      spans.push_back(buffers_.back().span());
      free_.push_back(i);
    }
    store.register_buffers(spans);
  }
  ~NvmeParameterHome() override {
    try {
      drop_pieces();
      store_.wait_all();
    } catch (...) {  // the store already reported it; the file is scratch
    }
  }
  std::string name() const override { return "nvme"; }
  std::int64_t host_bytes() const override { return static_cast<std::int64_t>(buffers_.size() * buffer_bytes_); }
  std::uint64_t nvme_bytes() const override { return bytes_; }
  std::uint64_t bytes_read() const override { return read_; }
  std::uint64_t bytes_read_on_fetch() const override { return read_on_fetch_; }

  void read_ahead(std::span<const ElementRange> ranges) override {
    if (!written_) return drop_pieces();
    std::vector<Piece> wanted;
    for (const ElementRange& range : ranges) {
      check_range(*this, range);
      for (const Piece& piece : pieces_of(range)) wanted.push_back(piece);
    }
    // Keep what is read ahead already and still wanted; free the buffers of the rest.
    std::vector<Piece> kept;
    for (Piece& piece : held_) {
      const bool asked = std::any_of(wanted.begin(), wanted.end(), [&](const Piece& each) { return each.same_bytes(piece); });
      if (asked) {
        kept.push_back(std::move(piece));
      } else {
        store_.wait(*piece.request);
        free_.push_back(piece.buffer);
      }
    }
    held_ = std::move(kept);
    // Then the wanted pieces in order, while buffers are free.
    for (Piece& piece : wanted) {
      if (free_.empty()) break;
      if (std::any_of(held_.begin(), held_.end(), [&](const Piece& each) { return each.same_bytes(piece); })) continue;
      start_read(piece);
      held_.push_back(std::move(piece));
    }
  }

  void fetch(ElementRange range, void* destination) override {
    check_range(*this, range);
    if (!written_) throw std::logic_error("parameters fetched from NVMe before the partition was stored");
    if (range.count == 0) return;
    finish_writes();
    std::deque<Piece> wanted;
    for (const Piece& piece : pieces_of(range)) {
      const auto held = std::find_if(held_.begin(), held_.end(), [&](const Piece& each) { return each.same_bytes(piece); });
      if (held == held_.end()) {
        wanted.push_back(piece);
        continue;
      }
      const Piece found = *held;  // read ahead: its bytes land now
      held_.erase(held);
      land(found, range, destination);
    }
    for (const Piece& piece : wanted) read_on_fetch_ += piece.end - piece.begin;
    std::deque<Piece> reading;  // the rest, through every free buffer
    while (!wanted.empty() || !reading.empty()) {
      // The rest of the read-ahead (another range of the same layer) stays unless its buffers are needed.
      if (reading.empty() && free_.empty()) drop_pieces();
      while (!wanted.empty() && !free_.empty()) {
        start_read(wanted.front());
        reading.push_back(wanted.front());
        wanted.pop_front();
      }
      land(reading.front(), range, destination);
      reading.pop_front();
    }
  }

  void store(ElementRange range, const void* values) override {
    check_range(*this, range);
    const std::size_t element = dtype_size(dtype());
    const std::uint64_t at = static_cast<std::uint64_t>(range.begin) * element;
    if (range.begin == 0) {
      drop_pieces();
      finish_writes();
      device_.synchronize(device_.default_stream());
      written_bytes_ = 0;
      filling_.reset();
    }
    if (at != written_bytes_) {
      throw std::logic_error("parameters stored out of order: elements from " + std::to_string(range.begin) + " after " +
                             std::to_string(written_bytes_ / element));
    }
    const auto* source = static_cast<const std::byte*>(values);
    std::size_t left = static_cast<std::size_t>(range.count) * element;
    while (left > 0) {
      if (!filling_) filling_ = take_buffer();
      const std::size_t in_buffer = written_bytes_ % buffer_bytes_;
      const std::size_t step = std::min(left, buffer_bytes_ - in_buffer);
      std::memcpy(buffers_[static_cast<std::size_t>(*filling_)].as<std::byte>() + in_buffer, source, step);
      source += step;
      left -= step;
      written_bytes_ += step;
      if (written_bytes_ % buffer_bytes_ == 0 || written_bytes_ == bytes_) write_filled();
    }
  }

  void flush() override {
    finish_writes();
    if (written_bytes_ != bytes_) {
      throw std::logic_error("a parameter pass stored " + std::to_string(written_bytes_) + " of the partition's " + std::to_string(bytes_) + " bytes");
    }
    written_ = true;
  }

 private:
  struct Piece {
    std::uint64_t begin = 0, end = 0;  // file bytes
    int buffer = -1;
    std::optional<IoRequest> request;
    bool same_bytes(const Piece& other) const { return begin == other.begin && end == other.end; }
  };

  std::vector<Piece> pieces_of(ElementRange range) const {
    const std::size_t element = dtype_size(dtype()), chunk = store_.chunk_bytes();
    const std::uint64_t first = static_cast<std::uint64_t>(range.begin) * element / chunk * chunk;
    const std::uint64_t last = std::min<std::uint64_t>((static_cast<std::uint64_t>(range.begin + range.count) * element + chunk - 1) / chunk * chunk, bytes_);
    std::vector<Piece> pieces;
    for (std::uint64_t at = first; at < last; at += buffer_bytes_) pieces.push_back({at, std::min<std::uint64_t>(at + buffer_bytes_, last), -1, {}});
    return pieces;
  }
  int take_buffer() {
    if (free_.empty()) throw std::logic_error("the NVMe parameter home has no free buffer");
    const int buffer = free_.back();
    free_.pop_back();
    return buffer;
  }
  void start_read(Piece& piece) {
    piece.buffer = take_buffer();
    read_ += piece.end - piece.begin;
    piece.request = store_.read_async(file_, piece.begin, buffers_[static_cast<std::size_t>(piece.buffer)].data(), piece.end - piece.begin);
  }
  // Waits for a piece's read, copies its part of `range` to the device and frees its buffer.
  void land(const Piece& piece, ElementRange range, void* destination) {
    store_.wait(*piece.request);
    const std::size_t element = dtype_size(dtype());
    const std::uint64_t from = std::max<std::uint64_t>(piece.begin, static_cast<std::uint64_t>(range.begin) * element);
    const std::uint64_t to = std::min<std::uint64_t>(piece.end, static_cast<std::uint64_t>(range.begin + range.count) * element);
    if (from < to) {
      device_.copy(static_cast<std::byte*>(destination) + (from - static_cast<std::uint64_t>(range.begin) * element),
                   buffers_[static_cast<std::size_t>(piece.buffer)].as<std::byte>() + (from - piece.begin), to - from, CopyKind::host_to_device,
                   device_.default_stream());
      device_.synchronize(device_.default_stream());  // the buffer is read again only after the copy
    }
    free_.push_back(piece.buffer);
  }
  void drop_pieces() {
    for (const Piece& piece : held_) {
      store_.wait(*piece.request);
      free_.push_back(piece.buffer);
    }
    held_.clear();
  }
  void write_filled() {
    const std::uint64_t begin = (written_bytes_ - 1) / buffer_bytes_ * buffer_bytes_;
    writing_.push_back({begin, written_bytes_, *filling_, store_.write_async(file_, begin, buffers_[static_cast<std::size_t>(*filling_)].data(),
                                                                               written_bytes_ - begin)});
    filling_.reset();
    // The next buffer: a free one, else the oldest write's once it is done.
    if (free_.empty() && !writing_.empty()) finish_oldest_write();
  }
  void finish_oldest_write() {
    store_.wait(*writing_.front().request);
    free_.push_back(writing_.front().buffer);
    writing_.pop_front();
  }
  void finish_writes() {
    while (!writing_.empty()) finish_oldest_write();
  }

  Device& device_;
  NvmeStore& store_;
  std::uint64_t bytes_;
  std::size_t buffer_bytes_ = 0;
  FileId file_ = 0;
  std::vector<HostBuffer> buffers_;
  std::vector<int> free_;
  std::vector<Piece> held_;     // read ahead
  std::deque<Piece> writing_;   // stores in flight
  std::optional<int> filling_;  // the buffer stores copy into
  std::uint64_t written_bytes_ = 0;
  bool written_ = false;        // a whole pass has been stored
  std::uint64_t read_ = 0;           // bytes read from the file
  std::uint64_t read_on_fetch_ = 0;  // of them, read by fetch() (not read ahead)
};

}  // namespace

std::unique_ptr<ParameterHome> make_host_parameter_home(Device& device, std::int64_t elements, DType dtype, PinnedHostAllocator* pinned) {
  return std::make_unique<HostParameterHome>(device, elements, dtype, pinned);
}

std::unique_ptr<ParameterHome> make_dry_parameter_home(std::int64_t elements, DType dtype) {
  return std::make_unique<DryParameterHome>(elements, dtype);
}

std::unique_ptr<ParameterHome> make_nvme_parameter_home(Device& device, NvmeStore& store, std::int64_t elements, DType dtype, int buffer_count,
                                                        std::size_t buffer_bytes, PinnedHostAllocator* pinned) {
  return std::make_unique<NvmeParameterHome>(device, store, elements, dtype, buffer_count, buffer_bytes, pinned);
}

}  // namespace ferry::offload
