// Helpers for the pickle and snapshot tests: bytes from hex (pickles Python wrote, pasted as text) and
// the directory of the checked-in test snapshots.
#pragma once

#include <string>
#include <string_view>

namespace ferry::testing {

inline std::string from_hex(std::string_view hex) {
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return bytes;
}

inline std::string snapshot_data_directory() { return std::string(FERRY_SOURCE_DIR) + "/tests/data/snapshots"; }

}  // namespace ferry::testing
