// Reading a JSON config: typed values and unknown-key checks whose errors name the key, the value
// and the keys known at that place. Shared by the sections of `ferry train --config`.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>

namespace ferry::config {

using nlohmann::json;

template <typename T>
T value_of(const json& node, const std::string& key) {
  try {
    return node.get<T>();
  } catch (const json::exception&) {
    throw std::invalid_argument("config key '" + key + "' has the wrong type: " + node.dump());
  }
}

inline void reject_unknown(const json& node, const std::string& where, const std::set<std::string>& known) {
  if (!node.is_object()) throw std::invalid_argument("config key '" + where + "' must be an object");
  for (const auto& [key, value] : node.items()) {
    if (!known.contains(key)) {
      std::string choices;
      for (const std::string& each : known) choices += (choices.empty() ? "" : ", ") + each;
      throw std::invalid_argument("unknown config key '" + (where.empty() ? key : where + "." + key) + "' (known here: " + choices + ")");
    }
  }
}

}  // namespace ferry::config
