#include "engine/core/shape.h"

#include <sstream>
#include <stdexcept>

namespace ferry {

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t count = 1;
  for (std::int64_t extent : shape) {
    if (__builtin_mul_overflow(count, extent, &count)) {
      throw std::invalid_argument("shape " + shape_to_string(shape) + " has more elements than 2^63 - 1");
    }
  }
  return count;
}

}  // namespace ferry
