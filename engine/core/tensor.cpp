#include "engine/core/tensor.h"

#include <sstream>
#include <stdexcept>

#include "allocator/cleanup.h"

namespace ferry {

namespace {

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

}  // namespace

Storage::Storage(Device& device, std::size_t bytes, MemoryCategory category, TagId tag, Stream stream)
    : device_(&device),
      allocation_(device.allocator().malloc(bytes, stream.id, category, tag)),
      bytes_(bytes),
      category_(category),
      stream_(stream) {}

Storage::~Storage() {
  run_cleanup("freeing a tensor's storage", [&] { device_->allocator().free(allocation_); });
}

void Storage::record_stream(Stream stream) { device_->allocator().record_stream(allocation_, stream.id); }

Tensor Tensor::empty(Device& device, const Shape& shape, DType dtype, MemoryCategory category,
                     std::string_view tag, Stream stream) {
  for (std::int64_t extent : shape) {
    if (extent < 0) throw std::invalid_argument("negative extent in shape " + shape_to_string(shape));
  }
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  const TagId tag_id = device.allocator().intern_tag(tag);
  tensor.storage_ = std::make_shared<Storage>(device, tensor.nbytes(), category, tag_id, stream);
  return tensor;
}

Tensor Tensor::zeros(Device& device, const Shape& shape, DType dtype, MemoryCategory category,
                     std::string_view tag, Stream stream) {
  Tensor tensor = empty(device, shape, dtype, category, tag, stream);
  device.fill_zero(tensor.data(), tensor.nbytes(), stream);
  return tensor;
}

std::int64_t Tensor::size(std::int64_t dimension) const {
  if (dimension < 0) dimension += dim();
  if (dimension < 0 || dimension >= dim()) {
    throw std::out_of_range("dimension " + std::to_string(dimension) + " out of range for shape " +
                            shape_to_string(shape_));
  }
  return shape_[static_cast<std::size_t>(dimension)];
}

Device& Tensor::device() const {
  if (!storage_) throw std::logic_error("undefined tensor has no device");
  return storage_->device();
}

MemoryCategory Tensor::category() const {
  if (!storage_) throw std::logic_error("undefined tensor has no memory category");
  return storage_->category();
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

void* Tensor::data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

void Tensor::check_element_size(std::size_t element_size) const {
  if (element_size != dtype_size(dtype_)) {
    throw std::invalid_argument("tensor of dtype " + std::string(dtype_name(dtype_)) + " accessed as " +
                                std::to_string(element_size) + "-byte elements");
  }
}

void Tensor::require_contiguous(std::string_view operation) const {
  if (!is_contiguous()) {
    throw std::invalid_argument(std::string(operation) + " needs a contiguous tensor; shape " +
                                shape_to_string(shape_) + " has strides " + shape_to_string(strides_));
  }
}

Tensor Tensor::reshape(const Shape& shape) const {
  require_contiguous("reshape");
  Shape resolved = shape;
  std::int64_t known = 1;
  std::int64_t inferred = -1;
  for (std::size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      if (inferred >= 0) throw std::invalid_argument("reshape: more than one -1 in " + shape_to_string(shape));
      inferred = static_cast<std::int64_t>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (inferred >= 0 && known != 0) resolved[static_cast<std::size_t>(inferred)] = numel() / known;
  if (shape_numel(resolved) != numel()) {
    throw std::invalid_argument("reshape: cannot view shape " + shape_to_string(shape_) + " as " +
                                shape_to_string(shape));
  }
  Tensor view = *this;
  view.shape_ = resolved;
  view.strides_ = contiguous_strides(resolved);
  return view;
}

Tensor Tensor::narrow(std::int64_t dimension, std::int64_t start, std::int64_t length) const {
  const std::int64_t extent = size(dimension);
  if (dimension < 0) dimension += dim();
  if (start < 0 || length < 0 || start + length > extent) {
    throw std::out_of_range("narrow: [" + std::to_string(start) + ", " + std::to_string(start + length) +
                            ") out of range for dimension " + std::to_string(dimension) + " of shape " +
                            shape_to_string(shape_));
  }
  Tensor view = *this;
  view.shape_[static_cast<std::size_t>(dimension)] = length;
  view.offset_ += start * strides_[static_cast<std::size_t>(dimension)];
  return view;
}

void Tensor::copy_from_host(const void* source, Stream stream) const {
  require_contiguous("copy_from_host");
  device().copy(data(), source, nbytes(), CopyKind::host_to_device, stream);
}

void Tensor::copy_to_host(void* destination, Stream stream) const {
  require_contiguous("copy_to_host");
  device().copy(destination, data(), nbytes(), CopyKind::device_to_host, stream);
}

void Tensor::copy_from(const Tensor& source, Stream stream) const {
  require_contiguous("copy_from");
  source.require_contiguous("copy_from");
  if (source.shape_ != shape_ || source.dtype_ != dtype_) {
    throw std::invalid_argument("copy_from: shape/dtype " + shape_to_string(source.shape_) + " " +
                                std::string(dtype_name(source.dtype_)) + " differs from " + shape_to_string(shape_) +
                                " " + std::string(dtype_name(dtype_)));
  }
  if (&source.device() != &device()) {
    throw std::invalid_argument("copy_from: tensors live on different devices; copy through the host");
  }
  device().copy(data(), source.data(), nbytes(), CopyKind::device_to_device, stream);
}

void copy_from_host_f32(const Tensor& tensor, const float* values) {
  const auto count = static_cast<std::size_t>(tensor.numel());
  if (tensor.dtype() == DType::f32) {
    tensor.copy_from_host(values);
    return;
  }
  std::vector<std::byte> elements(tensor.nbytes());
  convert_from_f32(values, elements.data(), tensor.dtype(), count);
  tensor.copy_from_host(elements.data());
}

std::vector<float> copy_to_host_f32(const Tensor& tensor) {
  const auto count = static_cast<std::size_t>(tensor.numel());
  std::vector<float> values(count);
  if (tensor.dtype() == DType::f32) {
    tensor.copy_to_host(values.data());
    return values;
  }
  std::vector<std::byte> elements(tensor.nbytes());
  tensor.copy_to_host(elements.data());
  convert_to_f32(elements.data(), values.data(), tensor.dtype(), count);
  return values;
}

}  // namespace ferry
