// detect_rank_environment: the first launcher whose rank variable is set, in the order mpirun (Open MPI,
// then MPICH's hydra), Slurm, torchrun. The world size must come with the rank; the local rank is 0
// when the launcher does not give it, and the local size the world size (as if every rank shared this
// machine). Values are checked against each other.
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/comm/communicator.h"
#include "engine/comm/environment_variables.h"

namespace ferry {
namespace {

struct LauncherVariables {
  const char* launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_size;
};

// Precedence: mpirun inside a Slurm allocation sets both, and torchrun's names are the most generic.
constexpr LauncherVariables kLaunchers[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

// The variable's value as an int in [minimum, limit); `limit_text` says where the limit comes from.
int read_bounded(const EnvironmentReader& environment, const char* name, std::int64_t minimum, std::int64_t limit,
                 const std::string& limit_text) {
  const std::int64_t value = environment.integer(name).value();
  if (value < minimum) {
    throw std::invalid_argument(environment.describe(name) + " must be at least " + std::to_string(minimum));
  }
  if (value >= limit) throw std::invalid_argument(environment.describe(name) + " must be below " + limit_text);
  return static_cast<int>(value);
}

RankEnvironment read_launcher(const EnvironmentReader& environment, const LauncherVariables& variables) {
  if (!environment.is_set(variables.world_size)) {
    throw std::invalid_argument(environment.describe(variables.rank) + " is set but " + variables.world_size +
                                " is not: the launcher's environment is incomplete");
  }
  RankEnvironment result;
  result.launcher = variables.launcher;
  result.world_size = read_bounded(environment, variables.world_size, 1, std::int64_t{INT_MAX} + 1, "2^31");
  const std::string world_text = environment.describe(variables.world_size);
  result.rank = read_bounded(environment, variables.rank, 0, result.world_size, "the world size " + world_text);
  if (environment.is_set(variables.local_rank)) {
    result.local_rank =
        read_bounded(environment, variables.local_rank, 0, result.world_size, "the world size " + world_text);
  }
  result.local_size = environment.is_set(variables.local_size)
                          ? read_bounded(environment, variables.local_size, result.local_rank + 1, std::int64_t{result.world_size} + 1,
                                         "the world size " + world_text + " + 1")
                          : result.world_size;  // unknown: as if every rank shared this machine
  return result;
}

}  // namespace

RankEnvironment detect_rank_environment(EnvironmentLookup lookup) {
  const EnvironmentReader environment(lookup);
  for (const LauncherVariables& variables : kLaunchers) {
    if (environment.is_set(variables.rank)) return read_launcher(environment, variables);
  }
  return RankEnvironment{};
}

}  // namespace ferry
