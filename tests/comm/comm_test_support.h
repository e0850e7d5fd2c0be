// Helpers for the communicator's tests: a fake process environment for the functions that read it
// through a plain function pointer (fake_lookup<kVariables> answers from a constant table), and the
// message of an expected exception.
#pragma once

#include <string>
#include <string_view>

namespace ferry::testing {

struct FakeVariable {
  std::string_view name;
  const char* value;
};

template <const auto& kVariables>
const char* fake_lookup(const char* name) {
  for (const FakeVariable& variable : kVariables) {
    if (variable.name == name) return variable.value;
  }
  return nullptr;
}

// The message of the `Error` that `operation` throws, or "(nothing thrown)".
template <typename Error, typename Operation>
std::string error_of(Operation&& operation) {
  try {
    operation();
  } catch (const Error& error) {
    return error.what();
  }
  return "(nothing thrown)";
}

inline bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace ferry::testing
