// One run at a time saves into a --save root: SaveRootLock holds an exclusive flock on ROOT/.ferry-lock
// for the run's life (the kernel drops it when the process ends, however it ends, so no stale lock is
// left), and the file names its holder (PID, host, start) so that a second run's refusal says who.
#pragma once

#include <string>

namespace ferry {

class SaveRootLock {
 public:
  // Creates ROOT when missing. Throws CheckpointError naming the holder when another process holds it.
  explicit SaveRootLock(const std::string& root);
  ~SaveRootLock();
  SaveRootLock(const SaveRootLock&) = delete;
  SaveRootLock& operator=(const SaveRootLock&) = delete;

  static constexpr const char* kFileName = ".ferry-lock";

 private:
  int fd_ = -1;
};

}  // namespace ferry
