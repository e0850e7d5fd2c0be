#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "offload/host_buffer.h"
#include "offload/nvme_store.h"
#include "offload/optimizer_state_tier.h"

namespace ferry::offload {

StateGroup OptimizerStateTier::bounds_of(std::int64_t group) const {
  if (group < 0 || group >= group_count()) {
    throw std::out_of_range("optimizer state group " + std::to_string(group) + " of " + std::to_string(group_count()));
  }
  StateGroup result;
  result.begin = group * group_elements_;
  result.count = std::min(group_elements_, total_ - result.begin);
  return result;
}

namespace {

class HostStateTier final : public OptimizerStateTier {
 public:
  HostStateTier(std::int64_t total, std::int64_t group_elements, PinnedHostAllocator* pinned)
      : OptimizerStateTier(total, group_elements) {
    const std::size_t bytes = static_cast<std::size_t>(total) * sizeof(float);
    for (HostBuffer* buffer : {&master_, &first_moment_, &second_moment_}) {
      *buffer = HostBuffer(pinned, bytes, MemoryCategory::optimizer_states);
      if (bytes > 0) std::memset(buffer->data(), 0, bytes);
    }
  }
  std::string name() const override { return "cpu"; }
  void prefetch(std::int64_t) override {}
  StateGroup acquire(std::int64_t group) override {
    StateGroup result = bounds_of(group);
    result.master = master_.as<float>() + result.begin;
    result.first_moment = first_moment_.as<float>() + result.begin;
    result.second_moment = second_moment_.as<float>() + result.begin;
    return result;
  }
  void release(std::int64_t, bool) override {}
  void flush() override {}

 private:
  HostBuffer master_, first_moment_, second_moment_;
};

// Group g lives at g * region_bytes of one file as [master | first moment | second moment], each
// group_elements long (the last group's tail is padding), the region rounded up to whole chunks.
class NvmeStateTier final : public OptimizerStateTier {
 public:
  NvmeStateTier(NvmeStore& store, std::int64_t total, std::int64_t group_elements, int buffer_count, PinnedHostAllocator* pinned)
      : OptimizerStateTier(total, group_elements), store_(store), written_(static_cast<std::size_t>(group_count()), false) {
    if (buffer_count < 2) throw std::invalid_argument("the NVMe optimizer tier needs at least 2 buffers, got " + std::to_string(buffer_count));
    const std::size_t chunk = store.chunk_bytes();
    const std::size_t state_bytes = 3 * static_cast<std::size_t>(group_elements) * sizeof(float);
    region_bytes_ = (state_bytes + chunk - 1) / chunk * chunk;
    file_ = store.create_file("optimizer_states.bin", static_cast<std::uint64_t>(group_count()) * region_bytes_);
    // The name goes at once: the state lives while the store holds the file open, and no signal, crash
    // or SIGKILL leaves it behind (nor does another run's file of the same name get removed at the end).
    std::error_code ignored;
    std::filesystem::remove(store_.path(file_), ignored);
    std::vector<std::span<std::byte>> spans;
    for (int i = 0; i < buffer_count; ++i) {
      Slot slot;
      slot.buffer = HostBuffer(pinned, region_bytes_, MemoryCategory::optimizer_states, store.alignment());
      slots_.push_back(std::move(slot));
      if (reinterpret_cast<std::uintptr_t>(slots_.back().buffer.data()) % store.alignment() != 0) {
        throw std::runtime_error("optimizer state buffer is not aligned to the NVMe store's " + std::to_string(store.alignment()) + " bytes");
      }
      spans.push_back(slots_.back().buffer.span());
    }
    store.register_buffers(spans);
  }
  ~NvmeStateTier() override {
    try {
      flush();
    } catch (...) {  // the store already reported it; the file is scratch (unnamed since it was made)
    }
  }
  std::string name() const override { return "nvme"; }
  std::uint64_t nvme_bytes() const override { return static_cast<std::uint64_t>(group_count()) * region_bytes_; }

  void prefetch(std::int64_t group) override {
    Slot& slot = slot_of(group);
    finish_write(slot);  // the buffer is not touched while a write from it is in flight
    if (slot.group == group) return;  // still here from the last visit
    slot.group = group;
    if (!written_[static_cast<std::size_t>(group)]) {  // never written: zero state
      std::memset(slot.buffer.data(), 0, region_bytes_);
      return;
    }
    slot.read = store_.read_async(file_, offset(group), slot.buffer.data(), region_bytes_);
  }
  StateGroup acquire(std::int64_t group) override {
    StateGroup result = bounds_of(group);
    prefetch(group);
    Slot& slot = slot_of(group);
    if (slot.read) {
      store_.wait(*slot.read);
      slot.read.reset();
    }
    auto* values = slot.buffer.as<float>();
    result.master = values;
    result.first_moment = values + group_elements();
    result.second_moment = values + 2 * group_elements();
    return result;
  }
  void release(std::int64_t group, bool dirty) override {
    Slot& slot = slot_of(group);
    if (!dirty) return;
    slot.write = store_.write_async(file_, offset(group), slot.buffer.data(), region_bytes_);
    written_[static_cast<std::size_t>(group)] = true;
  }
  void flush() override {
    for (Slot& slot : slots_) finish_write(slot);
  }

 private:
  struct Slot {
    HostBuffer buffer;
    std::int64_t group = -1;
    std::optional<IoRequest> read;
    std::optional<IoRequest> write;
  };
  Slot& slot_of(std::int64_t group) { return slots_[static_cast<std::size_t>(group) % slots_.size()]; }
  std::uint64_t offset(std::int64_t group) const { return static_cast<std::uint64_t>(group) * region_bytes_; }
  void finish_write(Slot& slot) {
    if (!slot.write) return;
    const IoRequest request = *slot.write;
    slot.write.reset();
    store_.wait(request);
  }

  NvmeStore& store_;
  FileId file_ = 0;
  std::size_t region_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<bool> written_;
};

}  // namespace

std::unique_ptr<OptimizerStateTier> make_host_state_tier(std::int64_t total, std::int64_t group_elements, PinnedHostAllocator* pinned) {
  return std::make_unique<HostStateTier>(total, group_elements, pinned);
}

std::unique_ptr<OptimizerStateTier> make_nvme_state_tier(NvmeStore& store, std::int64_t total, std::int64_t group_elements,
                                                         int buffer_count, PinnedHostAllocator* pinned) {
  return std::make_unique<NvmeStateTier>(store, total, group_elements, buffer_count, pinned);
}

}  // namespace ferry::offload
