// A save root of checkpoints, one directory per step (ROOT/step-00000006) and ROOT/latest, a symbolic
// link to the newest complete one (llm.c's and DeepSpeed's layout). A new checkpoint is written whole
// in a staging directory before it takes its name and `latest` moves, so a crash at any point leaves the
// previous checkpoint loadable; older ones beyond --keep-checkpoints are removed only after that.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ferry {

// ROOT/step-NNNNNNNN (eight digits or more).
std::string checkpoint_step_directory(const std::string& root, std::int64_t step);

// What --resume names, resolved to one checkpoint: a save root (it has `latest`) gives the checkpoint
// `latest` links to; a checkpoint directory (it has DONE, or is a partial one) is itself. A `latest`
// that names a missing directory throws CheckpointError naming the complete checkpoints that remain.
std::string resolve_checkpoint(const std::string& path);

// Removes what interrupted saves left in ROOT: temporary files and staging directories of processes
// that no longer run, and step directories without DONE. A step directory set aside by a save that died
// while replacing it is put back when its replacement never arrived. Returns the paths removed or
// restored (for the run's output).
std::vector<std::string> remove_stale_checkpoint_files(const std::string& root);

// Writes the checkpoint of `step` under ROOT: `write(directory)` fills a staging directory (ending with
// DONE), which then takes the name step-N (replacing an older checkpoint of the same step), `latest`
// moves to it, and complete checkpoints beyond the newest `keep` are removed (0: keep all). Returns the
// checkpoint's directory.
std::string save_checkpoint_step(const std::string& root, std::int64_t step, std::int64_t keep,
                                 const std::function<void(const std::string& directory)>& write);

}  // namespace ferry
