// comm_timeout_from_environment: FERRY_COMM_TIMEOUT_SECONDS, whole seconds, 300 when unset.
#include <limits>
#include <stdexcept>

#include "engine/comm/communicator.h"
#include "engine/comm/environment_variables.h"

namespace ferry {

std::chrono::milliseconds comm_timeout_from_environment(EnvironmentLookup lookup) {
  const EnvironmentReader environment(lookup);
  const std::optional<std::int64_t> seconds = environment.integer(kCommTimeoutVariable);
  if (!seconds) return kDefaultCommTimeout;
  constexpr std::int64_t kMostSeconds = std::numeric_limits<std::int64_t>::max() / 1000;
  if (*seconds < 1 || *seconds > kMostSeconds) {
    throw std::invalid_argument(environment.describe(kCommTimeoutVariable) +
                                " must be a positive whole number of seconds (default " +
                                std::to_string(kDefaultCommTimeout.count()) + ")");
  }
  return std::chrono::seconds(*seconds);
}

}  // namespace ferry
