#include "allocator/memory_category.h"

namespace ferry {

std::optional<MemoryCategory> parse_memory_category(std::string_view name) {
  for (MemoryCategory category : kAllMemoryCategories) {
    if (category_name(category) == name) return category;
  }
  return std::nullopt;
}

}  // namespace ferry
