// The ranks of a job agree on the job before step 1: each rank lists its resolved plan as named
// settings (flag names, the data's identity rather than its path), rank 0 compares them, and on a
// difference every rank stops with an error naming the first setting that differs and each rank's value.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/train/training_plan.h"

namespace ferry {

// Ranks launched with different settings (thrown on every rank, with the same text).
class JobMismatchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JobSetting {
  std::string name;   // as the user gives it: "--lr", "--data", "FERRY_ALLOC_CONF"
  std::string value;  // exact (doubles round-trip); files by content: "N bytes, XXH64 H"
};

// Every setting of `plan` that must be equal on every rank, in the order a user reads the flags: the
// model, the grid and batch, precision and device, recompute, ZeRO and offload, the run's length and
// seed, the optimizer, and what the run reads (data and initial weights by content, so a shared file
// under another mount point agrees) and where it saves. What may differ by rank is left out:
// kRankLocalSettings.
std::vector<JobSetting> job_settings(const TrainingPlan& plan);

// Settings that may differ by rank, named in the mismatch error: each rank's own compute threads, its
// NVMe directory (it uses nvme_path/rank-R) and what only rank 0 writes or prints.
inline constexpr const char* kRankLocalSettings = "--threads, --nvme-path (each rank keeps nvme_path/rank-R), --profile (each rank writes "
                                                  "DIR/rank-R), --metrics, --log-every and --summary (rank 0's)";

// The settings as one line of text for the gather, and back.
std::string encode_job_settings(const std::vector<JobSetting>& settings);
std::vector<JobSetting> decode_job_settings(const std::string& text);

// Empty when every rank's settings are equal; otherwise the error's text: the first setting (in
// job_settings' order) whose value differs, each value with the ranks that hold it.
std::string describe_job_mismatch(const std::vector<std::vector<JobSetting>>& ranks);

// Collective over `world` (every rank calls it, before any other collective of the job): throws
// JobMismatchError on every rank when the ranks' job_settings differ.
void require_same_job(Communicator& world, const TrainingPlan& plan);

}  // namespace ferry
