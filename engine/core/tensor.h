// Tensor: shape, strides, dtype and a reference-counted Storage from its device's caching allocator,
// with the memory category (and tag) it was allocated under. Views (reshape, narrow) share storage;
// the memory returns to the allocator when the last view goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/shape.h"

namespace ferry {



// One allocation from a device's allocator, freed when the last tensor using it goes.
class Storage {
 public:
  Storage(Device& device, std::size_t bytes, MemoryCategory category, TagId tag, Stream stream);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return allocation_.address; }
  std::size_t bytes() const { return bytes_; }
  Device& device() const { return *device_; }
  MemoryCategory category() const { return category_; }
  Stream stream() const { return stream_; }
  // The storage is used on another stream too: its memory is not reused before that work is done.
  void record_stream(Stream stream);

 private:
  Device* device_;
  Allocation allocation_;
  std::size_t bytes_;
  MemoryCategory category_;
  Stream stream_;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized memory from `device`'s allocator.
  static Tensor empty(Device& device, const Shape& shape, DType dtype, MemoryCategory category,
                      std::string_view tag = {}, Stream stream = {});
  static Tensor zeros(Device& device, const Shape& shape, DType dtype, MemoryCategory category,
                      std::string_view tag = {}, Stream stream = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t dimension) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  std::int64_t storage_offset() const { return offset_; }
  Device& device() const;
  MemoryCategory category() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;

  void* data() const;
  template <typename T>
  T* data_as() const {
    check_element_size(sizeof(T));
    return static_cast<T*>(data());
  }

  // Same storage, new shape (contiguous tensors only; one dimension may be -1).
  Tensor reshape(const Shape& shape) const;
  // Same storage, `length` entries of `dimension` from `start`.
  Tensor narrow(std::int64_t dimension, std::int64_t start, std::int64_t length) const;

  // Copies between this (contiguous) tensor and host memory of nbytes(), on `stream`.
  void copy_from_host(const void* source, Stream stream = {}) const;
  void copy_to_host(void* destination, Stream stream = {}) const;
  // Device-to-device copy of a contiguous tensor with the same shape and dtype.
  void copy_from(const Tensor& source, Stream stream = {}) const;

 private:
  void check_element_size(std::size_t element_size) const;
  void require_contiguous(std::string_view operation) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::f32;
};

// Host f32 values into and out of a floating tensor (f32, bf16 or f16), converting on the host.
void copy_from_host_f32(const Tensor& tensor, const float* values);
std::vector<float> copy_to_host_f32(const Tensor& tensor);

}  // namespace ferry
