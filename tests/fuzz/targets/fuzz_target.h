// A fuzz target: one parser fed arbitrary bytes. Each target defines `fuzz_<name>` (returns 0; typed
// errors are the expected outcome of bad input and are caught; a crash, a sanitizer report, a hang or an
// unbounded allocation is a finding). Built two ways: with clang and libFuzzer (scripts/fuzz.sh, where
// FERRY_LIBFUZZER makes it the LLVMFuzzerTestOneInput entry point), and into the corpus replay test,
// which runs every checked-in input through it in the ordinary and the sanitizer builds.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#ifdef FERRY_LIBFUZZER
#define FERRY_FUZZ_ENTRY(function)                                                        \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    return function(data, size);                                                          \
  }
#else
#define FERRY_FUZZ_ENTRY(function)
#endif

namespace ferry::fuzz {

// An error message a user reads is in ferry's words: a library's own text (nlohmann's json.exception,
// libstdc++'s basic_string or filesystem error, stoi, MPI_ERR, a std:: name) means an error path that
// wraps nothing. Such a message is a finding: the target traps, as for a crash. A word the input itself
// holds is the user's text quoted back (a key named "stoll_div"), not a library's.
inline void require_own_words(const std::exception& error, std::string_view input) {
  const std::string_view message = error.what();
  for (const std::string_view library : {"json.exception", "basic_string", "filesystem error", "stoi", "stoll", "MPI_ERR", "std::"}) {
    if (message.find(library) != std::string_view::npos && input.find(library) == std::string_view::npos) __builtin_trap();
  }
}

inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input as a file in memory (memfd), for readers that open a path: /proc/self/fd/N while it lives.
class MemoryFile {
 public:
  static std::optional<MemoryFile> of(const std::uint8_t* data, std::size_t size) {
    const int fd = ::memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd < 0) return std::nullopt;
    MemoryFile file(fd);
    if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) return std::nullopt;
    return file;
  }
  MemoryFile(MemoryFile&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  MemoryFile& operator=(MemoryFile&&) = delete;
  ~MemoryFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  explicit MemoryFile(int fd) : fd_(fd) {}
  int fd_;
};

int fuzz_alloc_conf(const std::uint8_t* data, std::size_t size);
int fuzz_byte_size(const std::uint8_t* data, std::size_t size);
int fuzz_config(const std::uint8_t* data, std::size_t size);
int fuzz_json(const std::uint8_t* data, std::size_t size);
int fuzz_profile(const std::uint8_t* data, std::size_t size);
int fuzz_rmm_trace(const std::uint8_t* data, std::size_t size);
int fuzz_safetensors(const std::uint8_t* data, std::size_t size);
int fuzz_schedule(const std::uint8_t* data, std::size_t size);
int fuzz_snapshot(const std::uint8_t* data, std::size_t size);
int fuzz_token_shard(const std::uint8_t* data, std::size_t size);
int fuzz_trainer_state(const std::uint8_t* data, std::size_t size);

}  // namespace ferry::fuzz
