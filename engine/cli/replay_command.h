// `ferry replay TRACE.csv`: replays an RMM allocation trace through the caching allocator on the
// meta device (or a GPU's real memory: --device cuda) and reports peaks, fragmentation, retries, OOMs
// and optionally the minimum capacity.
#pragma once

#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace ferry {

struct ReplayCommandOptions {
  std::string trace_path;
  std::string capacity;  // empty: unlimited
  std::optional<std::string> alloc_conf;  // unset: FERRY_ALLOC_CONF
  bool find_min_capacity = false;
  std::string device = "meta";  // meta: address space only; cuda: the GPU's memory, cudaMalloc or virtual memory
  std::string summary_path;
};

void add_replay_command(CLI::App& app, ReplayCommandOptions& options);
int run_replay_command(const ReplayCommandOptions& options);

}  // namespace ferry
