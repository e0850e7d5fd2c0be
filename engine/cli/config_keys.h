// Reading a JSON config: typed values and unknown-key checks whose errors name the key, the value
// and the keys known at that place. Shared by the sections of `ferry train --config`.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine/core/bounded_json.h"

namespace ferry::config {

using nlohmann::json;

// Integers must be whole numbers within T's range (2.7, 1e30 and 4294967297 for an int are errors
// naming the range, never truncated or wrapped); a whole number written as a float (5e8, as DeepSpeed's
// own examples write reduce_bucket_size) is that integer. Floating-point values must be finite; strings
// must not be empty.
template <typename T>
T value_of(const json& node, const std::string& key) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (node.is_number_float()) {
      const double value = node.get<double>();
      // Below 2^63 every whole double converts exactly; the bounds are compared as doubles.
      if (std::isfinite(value) && std::trunc(value) == value && value >= static_cast<double>(std::numeric_limits<T>::min()) &&
          value < std::ldexp(1.0, std::numeric_limits<T>::digits)) {
        return static_cast<T>(value);
      }
    }
    return json_integer<T>(node, "config key '" + key + "'");
  } else {
    T value;
    try {
      value = node.get<T>();
    } catch (const json::exception&) {
      throw std::invalid_argument("config key '" + key + "' has the wrong type: " + node.dump());
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(value)) throw std::invalid_argument("config key '" + key + "' is " + node.dump() + ": it must be a finite number");
    }
    if constexpr (std::is_same_v<T, std::string>) {
      if (value.empty()) throw std::invalid_argument("config key '" + key + "' is empty: give it a value, or leave the key out for its default");
    }
    return value;
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
