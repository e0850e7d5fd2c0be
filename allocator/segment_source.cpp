#include "allocator/segment_source.h"

#include "allocator/allocator_errors.h"
#include "allocator/size_rounding.h"

namespace ferry {

namespace {
[[noreturn]] void no_expandable_support(const SegmentSource& source) {
  throw AllocatorConfigError("segment source '" + source.name() +
                             "' does not support expandable segments; unset expandable_segments in "
                             "FERRY_ALLOC_CONF");
}
}  // namespace

std::size_t SegmentSource::expandable_page_bytes(bool small_pool) const {
  const std::size_t granularity = page_granularity();
  const std::size_t page = small_pool ? kSmallBuffer : kLargeBuffer;
  return (page + granularity - 1) / granularity * granularity;
}

void* SegmentSource::reserve_address_range(std::size_t) { no_expandable_support(*this); }
void SegmentSource::release_address_range(void*, std::size_t) { no_expandable_support(*this); }
bool SegmentSource::map_pages(void*, std::size_t) { no_expandable_support(*this); }
void SegmentSource::unmap_pages(void*, std::size_t) { no_expandable_support(*this); }

}  // namespace ferry
