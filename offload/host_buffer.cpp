#include "offload/host_buffer.h"

#include <new>
#include <utility>

#include "allocator/cleanup.h"

namespace ferry::offload {

HostBuffer::HostBuffer(PinnedHostAllocator* pinned, std::size_t bytes, MemoryCategory category, std::size_t alignment)
    : pinned_(pinned), bytes_(bytes), alignment_(alignment) {
  if (bytes == 0) return;
  if (pinned_ != nullptr) {
    data_ = pinned_->allocate(bytes, category);
  } else {
    const std::size_t padded = (bytes + alignment - 1) / alignment * alignment;
    data_ = ::operator new(padded, std::align_val_t{alignment});
  }
}

HostBuffer::~HostBuffer() { run_cleanup("freeing a host buffer", [&] { release(); }); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : pinned_(std::exchange(other.pinned_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      alignment_(other.alignment_) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pinned_ = std::exchange(other.pinned_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    alignment_ = other.alignment_;
  }
  return *this;
}

void HostBuffer::release() {
  if (data_ == nullptr) return;
  if (pinned_ != nullptr) {
    pinned_->free(data_);
  } else {
    ::operator delete(data_, std::align_val_t{alignment_});
  }
  data_ = nullptr;
}

}  // namespace ferry::offload
