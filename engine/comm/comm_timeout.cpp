// comm_timeout_from_environment: FERRY_COMM_TIMEOUT_SECONDS, whole seconds, 300 when unset.
#include <stdexcept>

#include "engine/comm/communicator.h"
#include "engine/comm/environment_variables.h"

namespace ferry {

std::chrono::milliseconds comm_timeout_from_environment(EnvironmentLookup lookup) {
  const EnvironmentReader environment(lookup);
  const std::optional<std::int64_t> seconds = environment.integer(kCommTimeoutVariable);
  if (!seconds) return kDefaultCommTimeout;
  // A year: deadlines are the steady clock's nanoseconds plus the timeout, which must not overflow.
  constexpr std::int64_t kMostSeconds = std::int64_t{365} * 24 * 3600;
  if (*seconds < 1 || *seconds > kMostSeconds) {
    throw std::invalid_argument(environment.describe(kCommTimeoutVariable) + " must be a whole number of seconds from 1 to " +
                                std::to_string(kMostSeconds) + " (a year; default " +
                                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kDefaultCommTimeout).count()) + ")");
  }
  return std::chrono::seconds(*seconds);
}

}  // namespace ferry
