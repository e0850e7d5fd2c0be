#include "engine/checkpoint/checkpoint_directory.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "engine/checkpoint/checkpoint.h"
#include "engine/core/atomic_file.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLatest = "latest";
constexpr const char* kDone = "DONE";
// Written first into every directory ferry stages: cleanup and replacing touch only directories that
// hold it (or a checkpoint's DONE), never a user's own.
constexpr const char* kStagedMarker = ".ferry-staged";
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

bool is_complete(const fs::path& directory) { return checkpoint_incomplete_reason(directory.string()).empty(); }

// A directory ferry staged or saved: it holds the staging marker, or a DONE (checkpoints of earlier
// versions have no marker), or nothing at all (a staging directory killed before its marker; removing
// an empty directory destroys nothing).
bool is_ferrys(const fs::path& directory) {
  std::error_code error;
  return fs::is_directory(fs::symlink_status(directory, error)) &&
         (fs::exists(fs::symlink_status(directory / kStagedMarker, error)) || fs::exists(fs::symlink_status(directory / kDone, error)) ||
          fs::is_empty(directory, error));
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
  std::error_code error;
  const fs::file_status current = fs::symlink_status(root / kLatest, error);
  if (fs::exists(current) && !fs::is_symlink(current)) {
    throw CheckpointError("'" + (root / kLatest).string() + "' is a " + (fs::is_directory(current) ? "directory" : "file") +
                          ", not the link ferry keeps to the newest checkpoint: ferry never replaces it; move it away or give another --save");
  }
  const fs::path link = root / (std::string(kLatest) + ".tmp." + std::to_string(::getpid()));
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

std::string intact_checkpoints_hint(const std::string& directory) {
  const fs::path checkpoint = fs::path(directory).lexically_normal();
  const fs::path root = checkpoint.has_filename() ? checkpoint.parent_path() : checkpoint.parent_path().parent_path();
  std::string intact;
  for (const auto& [step, path] : complete_checkpoints(root.empty() ? fs::path(".") : root)) {
    if (path.filename() != checkpoint.filename()) intact += " " + path.string();
  }
  return intact.empty() ? "no other complete checkpoint lies beside it; start without --resume"
                        : "resume from one of the intact checkpoints beside it:" + intact;
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path latest = fs::path(path) / kLatest;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(latest, error);
  std::string complete;
  for (const auto& [step, directory] : complete_checkpoints(path)) complete += " " + directory.string();
  const std::string choices = complete.empty() ? std::string("it holds no complete checkpoint") : "resume from one of:" + complete;
  if (fs::exists(status) && !fs::is_symlink(status)) {
    throw CheckpointError("checkpoint root '" + path + "': `latest` is a " + (fs::is_directory(status) ? "directory" : "file") +
                          ", not the link ferry keeps to the newest checkpoint; " + choices);
  }
  const std::optional<std::string> name = latest_name(path);
  if (!name) {
    // No `latest`: a step directory itself, or a root whose link is gone.
    if (!complete.empty() && !fs::exists(fs::path(path) / kDone, error)) {
      throw CheckpointError("checkpoint root '" + path + "' has no `latest` link; " + choices);
    }
    return path;
  }
  const fs::path target = fs::path(path) / *name;
  if (fs::is_directory(target, error)) return target.string();
  throw CheckpointError("checkpoint root '" + path + "': `latest` names '" + *name + "', which is missing (a save was interrupted); " + choices);
}

void require_save_root_usable(const std::string& root, const std::string& resumed_from, bool overwrite) {
  std::error_code error;
  if (!fs::exists(root, error)) return;
  if (!fs::is_directory(root, error)) throw CheckpointError("--save '" + root + "' is a file; give --save a directory");
  const fs::file_status latest = fs::symlink_status(fs::path(root) / kLatest, error);
  if (fs::exists(latest) && !fs::is_symlink(latest)) {
    throw CheckpointError("--save '" + root + "': its `latest` is a " + (fs::is_directory(latest) ? "directory" : "file") +
                          " ferry did not write (ferry keeps a link there to the newest checkpoint and never replaces anything else); "
                          "move it away or give another --save");
  }
  const auto checkpoints = complete_checkpoints(root);
  if (checkpoints.empty() || overwrite) return;
  if (!resumed_from.empty()) {
    const fs::path parent = fs::weakly_canonical(fs::path(resumed_from).lexically_normal().parent_path(), error);
    if (!error && parent == fs::weakly_canonical(root, error)) return;  // the run goes on from this root
  }
  throw CheckpointError("--save '" + root + "' holds " + std::to_string(checkpoints.size()) + " checkpoint" + (checkpoints.size() == 1 ? "" : "s") +
                        " of another run (the newest " + checkpoints.back().second.filename().string() +
                        "): a new run would overwrite them, and --keep-checkpoints would delete them; resume from it (--resume " + root +
                        "), give another --save, or add --overwrite-checkpoints");
}

std::vector<std::string> remove_stale_checkpoint_files(const std::string& root) {
  std::vector<std::string> changed;
  std::error_code error;
  if (!fs::is_directory(root, error)) return changed;
  // The root's entries, and those of its step directories (temporary files of a save into one), each
  // with whether it lies in the root (told by where it was found: `--save dir/` spells the root otherwise).
  std::vector<std::pair<fs::path, bool>> entries;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    entries.emplace_back(entry.path(), true);
    if (!step_of(entry.path().filename().string()) || !is_ferrys(entry.path())) continue;
    for (const fs::directory_entry& inner : fs::directory_iterator(entry.path(), error)) {
      if (owner_of(inner.path().filename().string())) entries.emplace_back(inner.path(), false);
    }
  }
  for (const auto& [path, in_root] : entries) {
    if (!fs::exists(fs::symlink_status(path, error))) continue;  // inside a directory removed before it
    const std::string name = path.filename().string();
    const std::optional<pid_t> owner = owner_of(name);
    if (!owner && step_of(name) && in_root && fs::exists(path / kStagedMarker, error) && !is_complete(path)) {
      remove_path(path);  // a step directory ferry staged whose DONE never became whole
      changed.push_back(path.string());
      continue;
    }
    if (!owner || process_runs(*owner)) continue;
    const std::size_t old = name.rfind(".old.");
    const std::size_t temporary = name.rfind(".tmp.");
    const std::string original_name = name.substr(0, old != std::string::npos ? old : temporary);
    const fs::path original = path.parent_path() / original_name;
    if (in_root && step_of(original_name)) {
      if (!is_ferrys(path)) continue;  // not a directory ferry staged or saved: a user's, left as it is
      if (old != std::string::npos && !fs::exists(original, error) && is_complete(path)) {
        rename_path(path, original);  // its replacement never took the name: the set-aside checkpoint is the one
        changed.push_back(original.string() + " (restored)");
        continue;
      }
    } else if (in_root) {
      // The `latest` link's replacement (a link), nothing else in the root.
      if (original_name != kLatest || !fs::is_symlink(fs::symlink_status(path, error))) continue;
    }
    // In the root: ferry's staged step directory or `latest` link; inside a step directory: a temporary
    // of one of ferry's directories (only those were listed).
    remove_path(path);
    changed.push_back(path.string());
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
    fs::create_directory(staging, error);
    if (error) throw CheckpointError("cannot create '" + staging.string() + "': " + error.message());
    // Created in place (not renamed): a staging directory killed at any moment is empty or holds it.
    std::ofstream marker(staging / kStagedMarker);
    marker << "staged by ferry (process " << pid << "); cleanup and pruning touch only such directories\n";
    marker.close();
    if (!marker) throw CheckpointError("cannot write '" + (staging / kStagedMarker).string() + "'");
    write(staging.string());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  // An older checkpoint of the same step is set aside, not deleted, until the new one has its name.
  const fs::path aside = final_path.string() + ".old." + pid;
  const bool replacing = fs::exists(fs::symlink_status(final_path, error));
  if (replacing && !is_ferrys(final_path)) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw CheckpointError("'" + final_path.string() + "' exists and is not a checkpoint ferry wrote (no DONE, no " + kStagedMarker +
                          "): ferry never replaces it; move it away or give another --save");
  }
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
