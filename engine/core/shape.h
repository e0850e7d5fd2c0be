// A tensor's shape: its extents, outermost first, their element count and their text. Apart from
// tensor.h so that readers of shapes in files (safetensors headers) need no device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

using Shape = std::vector<std::int64_t>;

std::string shape_to_string(const Shape& shape);
// The product of the extents; throws std::invalid_argument naming the shape when it passes 2^63 - 1 (a
// shape read from a file can say anything).
std::int64_t shape_numel(const Shape& shape);

}  // namespace ferry
