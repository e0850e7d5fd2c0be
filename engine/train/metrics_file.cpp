#include "engine/train/metrics_file.h"
#include "engine/core/bounded_json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/core/atomic_file.h"
#include "engine/report/summary_file.h"

namespace ferry {

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FileError(path, 0, std::string("cannot open the --metrics file for appending: ") + std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::append(const nlohmann::json& step, const Device& device) {
  if (fd_ < 0) return;
  const AllocatorStatistics statistics = device.allocator().statistics();
  std::array<std::int64_t, kNumMemoryCategories> current{};
  for (std::size_t c = 0; c < kNumMemoryCategories; ++c) current[c] = statistics.category_allocated_bytes[c].current;
  nlohmann::json line = step;
  line["memory"] = {{"allocated_by_category", bytes_by_category(current)},
                    {"max_by_category", bytes_by_category(category_peaks(statistics))},
                    {"peak_allocated", statistics.allocated_bytes.all().peak},
                    {"peak_reserved", statistics.reserved_bytes.all().peak}};
  const std::string text = json_text(line) + "\n";
  struct stat before {};
  if (::fstat(fd_, &before) != 0) before.st_size = -1;
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t wrote = ::write(fd_, text.data() + written, text.size() - written);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;
    written += static_cast<std::size_t>(wrote);
  }
  if (written == text.size()) return;
  // A line cut short (a full disk): back to the last whole line, and no more lines.
  const int cause = errno;
  const bool cut_back = before.st_size >= 0 && ::ftruncate(fd_, before.st_size) == 0;
  ::close(fd_);
  fd_ = -1;
  stopped_ = std::string("writing step ") + std::to_string(step.value("step", std::int64_t{0})) + "'s line failed (" +
             (written > 0 ? "a partial write" : std::strerror(cause != 0 ? cause : EIO)) + ")" +
             (cut_back ? "; the file ends with the last whole line" : "; the file's last line may be cut short");
  std::fprintf(stderr, "ferry: warning: --metrics '%s' stopped: %s; training goes on and its summary keeps every step\n", path_.c_str(),
               stopped_.c_str());
  std::fflush(stderr);
}

}  // namespace ferry
