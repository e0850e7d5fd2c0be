#include "engine/core/safetensors.h"
#include "engine/core/bounded_json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/atomic_file.h"

namespace ferry {
namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's limit
constexpr std::uint64_t kMaxExtent = 1ull << 56;           // elements of one tensor: far beyond any file

void read_exactly(int fd, void* destination, std::uint64_t bytes, std::uint64_t offset, const std::string& path) {
  auto* cursor = static_cast<char*>(destination);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, cursor, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw FileError(path, offset, std::string("read failed: ") + std::strerror(errno));
    if (got == 0) throw FileError(path, offset, "unexpected end of file");
    cursor += got;
    bytes -= static_cast<std::uint64_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::u16: return "U16";
  }
  return "?";
}

DType parse_safetensors_dtype(std::string_view name, const std::string& context) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16}) {
    if (safetensors_dtype_name(dtype) == name) return dtype;
  }
  throw SafetensorsError(context + ": dtype '" + std::string(name) + "' is not supported (F32, BF16, F16, I32, U16)");
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw FileError(path_, 0, std::string("cannot open safetensors file: ") + std::strerror(errno));
  try {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) throw FileError(path_, 0, std::string("stat failed: ") + std::strerror(errno));
    const auto file_size = static_cast<std::uint64_t>(info.st_size);
    if (file_size < 8) throw SafetensorsError("'" + path_ + "' is not a safetensors file: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
    unsigned char length_bytes[8];
    read_exactly(fd_, length_bytes, 8, 0, path_);
    std::uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
    if (header_bytes > kMaxHeaderBytes || header_bytes > file_size - 8) {
      throw SafetensorsError("'" + path_ + "' is not a valid safetensors file: header length " + std::to_string(header_bytes) +
                             " exceeds the file (" + std::to_string(file_size) + " bytes) or the 100 MB limit");
    }
    std::string header(header_bytes, '\0');
    read_exactly(fd_, header.data(), header_bytes, 8, path_);
    data_offset_ = 8 + header_bytes;
    const std::uint64_t data_bytes = file_size - data_offset_;
    nlohmann::json json;
    try {
      json = parse_bounded_json(header);
    } catch (const nlohmann::json::exception& error) {
      throw SafetensorsError("'" + path_ + "': the header is not valid JSON: " + describe_json_error(error));
    }
    if (!json.is_object()) throw SafetensorsError("'" + path_ + "': the header is not a JSON object");
    for (const auto& [name, value] : json.items()) {
      const std::string context = "'" + path_ + "' tensor '" + name + "'";
      if (name == "__metadata__") {
        if (!value.is_object()) throw SafetensorsError("'" + path_ + "': __metadata__ is not an object");
        for (const auto& [key, text] : value.items()) {
          if (!text.is_string()) throw SafetensorsError("'" + path_ + "': __metadata__ value '" + key + "' is not a string");
          metadata_[key] = text.get<std::string>();
        }
        continue;
      }
      if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets") ||
          !value["dtype"].is_string() || !value["shape"].is_array() || !value["data_offsets"].is_array() ||
          value["data_offsets"].size() != 2) {
        throw SafetensorsError(context + ": needs dtype (string), shape (array) and data_offsets ([begin, end])");
      }
      SafetensorsEntry entry;
      entry.name = name;
      entry.dtype = parse_safetensors_dtype(value["dtype"].get<std::string>(), context);
      std::uint64_t elements = 1;
      for (const auto& extent : value["shape"]) {
        if (!extent.is_number_unsigned()) throw SafetensorsError(context + ": shape entries must be non-negative integers");
        const auto size = extent.get<std::uint64_t>();
        if (size > kMaxExtent || __builtin_mul_overflow(elements, size, &elements) || elements > kMaxExtent) {
          throw SafetensorsError(context + ": shape " + value["shape"].dump() + " is too large");
        }
        entry.shape.push_back(static_cast<std::int64_t>(size));
      }
      if (!value["data_offsets"][0].is_number_unsigned() || !value["data_offsets"][1].is_number_unsigned()) {
        throw SafetensorsError(context + ": data_offsets must be non-negative integers");
      }
      entry.begin = value["data_offsets"][0].get<std::uint64_t>();
      entry.end = value["data_offsets"][1].get<std::uint64_t>();
      const std::uint64_t expected = static_cast<std::uint64_t>(entry.numel()) * dtype_size(entry.dtype);
      if (entry.end < entry.begin || entry.end - entry.begin != expected) {
        throw SafetensorsError(context + ": data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                               ") do not hold shape " + shape_to_string(entry.shape) + " (" + std::to_string(expected) + " bytes)");
      }
      if (entry.end > data_bytes) {
        throw SafetensorsError(context + ": data ends at " + std::to_string(entry.end) + " but the file holds only " +
                               std::to_string(data_bytes) + " data bytes (truncated file?)");
      }
      entries_.push_back(std::move(entry));
    }
    // Byte ranges must not overlap.
    std::vector<const SafetensorsEntry*> by_offset;
    for (const auto& entry : entries_) by_offset.push_back(&entry);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    const SafetensorsEntry* furthest = nullptr;  // the non-empty range reaching furthest so far
    for (const SafetensorsEntry* entry : by_offset) {
      if (entry->begin == entry->end) continue;
      if (furthest != nullptr && entry->begin < furthest->end) {
        throw SafetensorsError("'" + path_ + "': tensors '" + furthest->name + "' and '" + entry->name + "' overlap");
      }
      if (furthest == nullptr || entry->end > furthest->end) furthest = entry;
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  for (const auto& entry : entries_) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

void SafetensorsFile::read_raw(const SafetensorsEntry& entry, void* destination) const {
  read_exactly(fd_, destination, entry.end - entry.begin, data_offset_ + entry.begin, path_);
}

std::uint64_t safetensors_elements_offset(const SafetensorsEntry& entry, std::int64_t first, std::int64_t count, const std::string& path) {
  if (first < 0 || count < 0 || first + count > entry.numel()) {
    throw SafetensorsError("'" + path + "' tensor '" + entry.name + "' has " + std::to_string(entry.numel()) + " elements, not [" +
                           std::to_string(first) + ", " + std::to_string(first + count) + ")");
  }
  return entry.begin + static_cast<std::uint64_t>(first) * dtype_size(entry.dtype);
}

void SafetensorsFile::read_elements(const SafetensorsEntry& entry, std::int64_t first, std::int64_t count, void* destination) const {
  const std::uint64_t at = safetensors_elements_offset(entry, first, count, path_);
  read_exactly(fd_, destination, static_cast<std::uint64_t>(count) * dtype_size(entry.dtype), data_offset_ + at, path_);
}

std::vector<float> SafetensorsFile::read_f32(const SafetensorsEntry& entry) const {
  const auto count = static_cast<std::size_t>(entry.numel());
  std::vector<float> values(count);
  switch (entry.dtype) {
    case DType::f32:
      read_raw(entry, values.data());
      break;
    case DType::bf16:
    case DType::f16: {
      std::vector<std::uint16_t> bits(count);
      read_raw(entry, bits.data());
      if (entry.dtype == DType::bf16) {
        convert_bf16_to_f32(bits.data(), values.data(), count);
      } else {
        convert_f16_to_f32(bits.data(), values.data(), count);
      }
      break;
    }
    default:
      throw SafetensorsError("'" + path_ + "' tensor '" + entry.name + "': dtype " +
                             std::string(safetensors_dtype_name(entry.dtype)) + " is not a floating-point type");
  }
  return values;
}

std::string safetensors_header(std::vector<SafetensorsEntry>& entries, const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (SafetensorsEntry& entry : entries) {
    entry.begin = offset;
    entry.end = offset + static_cast<std::uint64_t>(shape_numel(entry.shape)) * dtype_size(entry.dtype);
    header[entry.name] = {{"dtype", safetensors_dtype_name(entry.dtype)}, {"shape", entry.shape}, {"data_offsets", {entry.begin, entry.end}}};
    offset = entry.end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return bytes + text;
}

void SafetensorsWriter::add(std::string name, DType dtype, Shape shape, const void* data) {
  for (const auto& item : items_) {
    if (item.name == name) throw SafetensorsError("safetensors writer: tensor '" + name + "' added twice");
  }
  items_.push_back(Item{std::move(name), dtype, std::move(shape), data});
}

void SafetensorsWriter::write(AtomicFileWriter& writer) const {
  std::vector<SafetensorsEntry> entries;
  for (const auto& item : items_) entries.push_back({item.name, item.dtype, item.shape});
  writer.write(safetensors_header(entries, metadata_));
  for (const auto& item : items_) {
    writer.write(item.data, static_cast<std::size_t>(shape_numel(item.shape)) * dtype_size(item.dtype));
  }
}

void SafetensorsWriter::write(const std::string& path) const {
  AtomicFileWriter writer(path);
  write(writer);
  writer.commit();
}

}  // namespace ferry
