#include "engine/checkpoint/checkpoint_directory.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>

#include "engine/checkpoint/checkpoint.h"
#include "engine/core/atomic_file.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLatest = "latest";
constexpr const char* kDone = "DONE";
constexpr std::string_view kStepPrefix = "step-";

// The step of a name "step-N" (digits only after the prefix), or nothing.
std::optional<std::int64_t> step_of(const std::string& name) {
  if (name.size() <= kStepPrefix.size() || name.compare(0, kStepPrefix.size(), kStepPrefix) != 0) return std::nullopt;
  std::int64_t step = 0;
  const char* first = name.data() + kStepPrefix.size();
  const char* last = name.data() + name.size();
  const auto [end, error] = std::from_chars(first, last, step);
  if (error != std::errc() || end != last || step < 0) return std::nullopt;
  return step;
}

// The process id of a temporary's name "X.tmp.PID" or "X.old.PID", or nothing.
std::optional<pid_t> owner_of(const std::string& name) {
  for (const std::string_view marker : {std::string_view(".tmp."), std::string_view(".old.")}) {
    const std::size_t at = name.rfind(marker);
    if (at == std::string::npos) continue;
    long long pid = 0;
    const char* first = name.data() + at + marker.size();
    const char* last = name.data() + name.size();
    const auto [end, error] = std::from_chars(first, last, pid);
    if (error == std::errc() && end == last && first != last && pid > 0) return static_cast<pid_t>(pid);
  }
  return std::nullopt;
}

bool process_runs(pid_t pid) { return pid == ::getpid() || ::kill(pid, 0) == 0 || errno == EPERM; }

bool is_complete(const fs::path& directory) {
  std::error_code error;
  return fs::is_regular_file(directory / kDone, error);
}

// Complete checkpoints under `root`, by step.
std::vector<std::pair<std::int64_t, fs::path>> complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    const std::optional<std::int64_t> step = step_of(entry.path().filename().string());
    if (step && entry.is_directory(error) && is_complete(entry.path())) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The directory name the `latest` link holds, or nothing without one.
std::optional<std::string> latest_name(const fs::path& root) {
  const fs::path latest = root / kLatest;
  std::error_code error;
  if (!fs::is_symlink(fs::symlink_status(latest, error))) return std::nullopt;
  return fs::read_symlink(latest, error).string();
}

void remove_path(const fs::path& path) {
  std::error_code error;
  fs::remove_all(path, error);
  if (error) throw CheckpointError("cannot remove '" + path.string() + "': " + error.message());
}

void rename_path(const fs::path& from, const fs::path& to) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error) throw CheckpointError("cannot rename '" + from.string() + "' to '" + to.string() + "': " + error.message());
}

// Points ROOT/latest at `name` atomically (a new link renamed over the old one).
void point_latest_at(const fs::path& root, const std::string& name) {
  const fs::path link = root / (std::string(kLatest) + ".tmp." + std::to_string(::getpid()));
  std::error_code error;
  fs::remove(link, error);
  fs::create_directory_symlink(name, link, error);
  if (error) throw CheckpointError("cannot create '" + link.string() + "' (the checkpoint's `latest` link): " + error.message());
  rename_path(link, root / kLatest);
  sync_directory(root.string());
}

// Removes complete checkpoints beyond the newest `keep`, never the one `latest` names.
void prune_checkpoints(const fs::path& root, std::int64_t keep, const std::string& latest) {
  if (keep <= 0) return;
  auto checkpoints = complete_checkpoints(root);
  std::int64_t excess = static_cast<std::int64_t>(checkpoints.size()) - keep;
  for (const auto& [step, path] : checkpoints) {
    if (excess <= 0) break;
    if (path.filename() == latest) continue;
    remove_path(path);
    --excess;
  }
  sync_directory(root.string());
}

}  // namespace

std::string checkpoint_step_directory(const std::string& root, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return (fs::path(root) / name).string();
}

std::string resolve_checkpoint(const std::string& path) {
  const std::optional<std::string> latest = latest_name(path);
  if (!latest) return path;
  const fs::path target = fs::path(path) / *latest;
  std::error_code error;
  if (fs::is_directory(target, error)) return target.string();
  std::string complete;
  for (const auto& [step, directory] : complete_checkpoints(path)) complete += " " + directory.string();
  throw CheckpointError("checkpoint root '" + path + "': `latest` names '" + *latest + "', which is missing (a save was interrupted); " +
                        (complete.empty() ? std::string("it holds no complete checkpoint") : "resume from one of:" + complete));
}

std::vector<std::string> remove_stale_checkpoint_files(const std::string& root) {
  std::vector<std::string> changed;
  std::error_code error;
  if (!fs::is_directory(root, error)) return changed;
  // The root's entries, and those of its step directories (temporary files of a save into one).
  std::vector<fs::path> entries;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    entries.push_back(entry.path());
    if (!step_of(entry.path().filename().string()) || !entry.is_directory(error)) continue;
    for (const fs::directory_entry& inner : fs::directory_iterator(entry.path(), error)) {
      if (owner_of(inner.path().filename().string())) entries.push_back(inner.path());
    }
  }
  for (const fs::path& path : entries) {
    if (!fs::exists(fs::symlink_status(path, error))) continue;  // inside a directory removed before it
    const std::string name = path.filename().string();
    const std::optional<pid_t> owner = owner_of(name);
    if (owner) {
      if (process_runs(*owner)) continue;
      const std::size_t old = name.rfind(".old.");
      const fs::path original = path.parent_path() / name.substr(0, old == std::string::npos ? 0 : old);
      if (old != std::string::npos && step_of(original.filename().string()) && !fs::exists(original, error) && is_complete(path)) {
        rename_path(path, original);  // its replacement never took the name: the set-aside checkpoint is the one
        changed.push_back(original.string() + " (restored)");
        continue;
      }
      remove_path(path);
      changed.push_back(path.string());
    } else if (step_of(name) && fs::is_directory(path, error) && !is_complete(path)) {
      remove_path(path);
      changed.push_back(path.string());
    }
  }
  if (!changed.empty()) sync_directory(root);
  return changed;
}

std::string save_checkpoint_step(const std::string& root, std::int64_t step, std::int64_t keep,
                                 const std::function<void(const std::string& directory)>& write) {
  std::error_code error;
  fs::create_directories(root, error);
  if (error) throw CheckpointError("cannot create checkpoint directory '" + root + "': " + error.message());
  const fs::path final_path = checkpoint_step_directory(root, step);
  const std::string pid = std::to_string(::getpid());
  const fs::path staging = final_path.string() + ".tmp." + pid;
  remove_path(staging);
  try {
    write(staging.string());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  // An older checkpoint of the same step is set aside, not deleted, until the new one has its name.
  const fs::path aside = final_path.string() + ".old." + pid;
  const bool replacing = fs::exists(final_path, error);
  if (replacing) rename_path(final_path, aside);
  rename_path(staging, final_path);
  sync_directory(root);
  const std::string name = final_path.filename().string();
  point_latest_at(root, name);
  if (replacing) remove_path(aside);
  prune_checkpoints(root, keep, name);
  return final_path.string();
}

}  // namespace ferry
