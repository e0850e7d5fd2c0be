#include "engine/checkpoint/save_root_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "engine/checkpoint/trainer_state.h"

namespace ferry {
namespace {

std::string holder_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "an unknown host");
  const std::time_t now = std::time(nullptr);
  char since[32] = {};
  std::tm utc{};
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", ::gmtime_r(&now, &utc));
  return "PID " + std::to_string(::getpid()) + " on host " + host + ", since " + since;
}

std::string read_holder(int fd) {
  char text[512] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<std::size_t>(got)) : std::string();
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? "a process that has not yet said who it is" : holder;
}

}  // namespace

SaveRootLock::SaveRootLock(const std::string& root) {
  std::error_code error;
  std::filesystem::create_directories(root, error);
  if (error) throw CheckpointError("cannot create checkpoint directory '" + root + "': " + error.message());
  const std::string path = (std::filesystem::path(root) / kFileName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CheckpointError("cannot open '" + path + "' (the save root's lock): " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int cause = errno;
    const std::string holder = cause == EWOULDBLOCK ? read_holder(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    if (cause != EWOULDBLOCK) throw CheckpointError("cannot lock '" + path + "' (the save root's lock): " + std::strerror(cause));
    throw CheckpointError("--save '" + root + "' is in use by another ferry run (" + holder +
                          "): two runs saving into one root destroy each other's checkpoints; wait for it to end, or give another --save");
  }
  const std::string holder = holder_text() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const int cause = errno;
    ::close(fd_);  // drops the lock
    fd_ = -1;
    throw CheckpointError("cannot write '" + path + "' (the save root's lock): " + std::strerror(cause));
  }
}

SaveRootLock::~SaveRootLock() {
  if (fd_ >= 0) ::close(fd_);  // drops the lock; the file stays, naming the last holder
}

}  // namespace ferry
