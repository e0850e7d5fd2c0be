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

// Where the intact checkpoints beside the step directory `directory` are, for an error about it:
// "resume from one of the intact checkpoints beside it: ..." or that there are none.
std::string intact_checkpoints_hint(const std::string& directory);

// Before a run saves into ROOT (--save): refuses (CheckpointError) a `latest` that is not ferry's link,
// and complete checkpoints of another run unless the run resumes from ROOT (`resumed_from` is one of its
// step directories) or `overwrite` (--overwrite-checkpoints).
void require_save_root_usable(const std::string& root, const std::string& resumed_from, bool overwrite);

// Removes what interrupted saves left in ROOT, only what ferry staged: staging directories (they hold
// ferry's marker) and temporary files of processes that no longer run, and staged step directories
// whose DONE never became whole. A step directory set aside by a save that died while replacing it is
// put back when its replacement never arrived. A user's own step-* directory or `latest` is never
// touched. Returns the paths removed or restored (for the run's output).
std::vector<std::string> remove_stale_checkpoint_files(const std::string& root);

// Writes the checkpoint of `step` under ROOT: `write(directory)` fills a staging directory (ending with
// DONE), which then takes the name step-N (replacing an older checkpoint of the same step), `latest`
// moves to it, and complete checkpoints beyond the newest `keep` are removed (0: keep all). A step-N or
// `latest` ferry did not write is never replaced (CheckpointError). Returns the checkpoint's directory.
std::string save_checkpoint_step(const std::string& root, std::int64_t step, std::int64_t keep,
                                 const std::function<void(const std::string& directory)>& write);

}  // namespace ferry
