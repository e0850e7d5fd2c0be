// Integers from the process environment, for the launcher's rank variables and the communicator's
// timeout: a set variable must hold a whole decimal integer, or std::invalid_argument names it and its
// value. Reads through an EnvironmentLookup so tests give a fake environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/comm/communicator.h"

namespace ferry {

class EnvironmentReader {
 public:
  explicit EnvironmentReader(EnvironmentLookup lookup);  // null: std::getenv

  bool is_set(const char* name) const { return lookup_(name) != nullptr; }
  // The value as an integer; nullopt when unset; throws std::invalid_argument when it is not one.
  std::optional<std::int64_t> integer(const char* name) const;
  // "NAME=value" for error messages ("NAME (unset)" when unset).
  std::string describe(const char* name) const;

 private:
  EnvironmentLookup lookup_;
};

}  // namespace ferry
