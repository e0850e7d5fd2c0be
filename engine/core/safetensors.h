// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the raw row-major data. SafetensorsFile validates
// everything before a byte is used; SafetensorsWriter writes a file atomically.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/atomic_file.h"
#include "engine/core/dtype.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"

namespace ferry {

// A malformed or mismatching safetensors file; the message names the file and the tensor.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string_view safetensors_dtype_name(DType dtype);  // "F32", "BF16", ...
DType parse_safetensors_dtype(std::string_view name, const std::string& context);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;  // offsets into the data section
  std::uint64_t end = 0;
  std::int64_t numel() const { return shape_numel(shape); }
};

// The bytes a file starts with: the 8-byte length and the JSON header (padded to 8 bytes) listing
// `entries` (name, dtype, shape; begin and end are laid end to end in this order) and `metadata`.
std::string safetensors_header(std::vector<SafetensorsEntry>& entries, const std::map<std::string, std::string>& metadata);

// Where elements [first, first + count) of `entry` start in the data section (bytes); throws
// SafetensorsError naming `path` and the tensor when the range passes the tensor's end.
std::uint64_t safetensors_elements_offset(const SafetensorsEntry& entry, std::int64_t first, std::int64_t count, const std::string& path);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const SafetensorsEntry* find(std::string_view name) const;
  // Where the data section starts in the file (after the length and the header).
  std::uint64_t data_offset() const { return data_offset_; }
  // Raw bytes of an entry (entry.end - entry.begin of them).
  void read_raw(const SafetensorsEntry& entry, void* destination) const;
  // Raw bytes of the entry's elements [first, first + count) (row-major); throws SafetensorsError past its end.
  void read_elements(const SafetensorsEntry& entry, std::int64_t first, std::int64_t count, void* destination) const;
  // The entry converted to f32 (from F32, F16 or BF16).
  std::vector<float> read_f32(const SafetensorsEntry& entry) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors (pointers to host data that must outlive write()) and writes them in the order added.
class SafetensorsWriter {
 public:
  void add(std::string name, DType dtype, Shape shape, const void* data);
  void set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }
  // Writes `path` atomically.
  void write(const std::string& path) const;
  // Streams into an open writer; the caller commits it (to publish several files together).
  void write(AtomicFileWriter& writer) const;

 private:
  struct Item {
    std::string name;
    DType dtype;
    Shape shape;
    const void* data;
  };
  std::vector<Item> items_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ferry
