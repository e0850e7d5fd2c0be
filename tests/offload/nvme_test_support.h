// Helpers for the NVMe store tests: a temporary directory removed afterwards, aligned buffers with a
// canary past their padded length, random bytes, and reading a file's bytes behind the store's back.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ferry::offload::testing {

class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ferry-nvme-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

constexpr std::byte canary_byte{0xA5};
constexpr std::size_t canary_bytes = 4096;

// Memory aligned to `alignment` with `capacity` usable bytes, followed by a canary that must survive.
class AlignedBuffer {
 public:
  AlignedBuffer(std::size_t capacity, std::size_t alignment) : capacity_(capacity) {
    const std::size_t total = (capacity + canary_bytes + alignment - 1) / alignment * alignment;
    memory_.reset(static_cast<std::byte*>(std::aligned_alloc(alignment, total)));
    std::memset(memory_.get(), 0, capacity);
    std::memset(memory_.get() + capacity, static_cast<int>(canary_byte), canary_bytes);
  }
  std::byte* data() { return memory_.get(); }
  const std::byte* data() const { return memory_.get(); }
  std::size_t capacity() const { return capacity_; }
  bool canary_intact() const {
    for (std::size_t index = 0; index < canary_bytes; ++index) {
      if (memory_.get()[capacity_ + index] != canary_byte) return false;
    }
    return true;
  }

 private:
  struct Free {
    void operator()(std::byte* memory) const { std::free(memory); }
  };
  std::unique_ptr<std::byte, Free> memory_;
  std::size_t capacity_;
};

inline void fill_random(std::byte* data, std::size_t bytes, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::size_t index = 0;
  for (; index + 8 <= bytes; index += 8) {
    const std::uint64_t value = generator();
    std::memcpy(data + index, &value, 8);
  }
  for (; index < bytes; ++index) data[index] = static_cast<std::byte>(generator());
}

inline std::uint64_t file_size(const std::string& path) {
  struct stat attributes {};
  if (::stat(path.c_str(), &attributes) != 0) return 0;
  return static_cast<std::uint64_t>(attributes.st_size);
}

// Changes one byte of a file through the page cache (not O_DIRECT) and syncs it, as a bad drive,
// another process or a bit flip would.
inline void flip_byte_on_disk(const std::string& path, std::uint64_t offset) {
  const int descriptor = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (descriptor < 0) throw std::runtime_error("cannot open " + path);
  unsigned char value = 0;
  if (::pread(descriptor, &value, 1, static_cast<off_t>(offset)) != 1) throw std::runtime_error("pread failed");
  value = static_cast<unsigned char>(value ^ 0x10u);
  if (::pwrite(descriptor, &value, 1, static_cast<off_t>(offset)) != 1) throw std::runtime_error("pwrite failed");
  ::fsync(descriptor);
  ::close(descriptor);
}

}  // namespace ferry::offload::testing
