// `ferry schedule`: generates (or reads) a pipeline schedule, shows each rank's compute actions and the
// lowered lists with sends and receives, validates it, simulates it against the theoretical bubble and
// writes its Chrome trace and CSV.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace ferry {

struct ScheduleCommandOptions {
  std::optional<std::int32_t> ranks;          // --pp
  std::optional<std::int32_t> micro_batches;  // --micro-batches
  std::string schedule_name;                  // --schedule; empty with --from
  std::string costs;                          // --costs F,B[,W]; empty: 1,1,0 (1,1,1 when the backward is split)
  std::string trace_path;
  std::string csv_path;
  std::string from_path;                      // a hand-edited schedule (text or CSV) instead of a generated one
};

void add_schedule_command(CLI::App& app, ScheduleCommandOptions& options);
int run_schedule_command(const ScheduleCommandOptions& options);

}  // namespace ferry
