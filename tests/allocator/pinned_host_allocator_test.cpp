// Pinned host allocator: exact sizes, exact-size reuse, statistics, NUMA placement via hwloc.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>

#include "allocator/pinned_host_allocator.h"

namespace ferry {
namespace {

TEST(PinnedHostAllocator, KeepsExactSizesAndReusesOnlyExactMatches) {
  PinnedHostAllocator pinned;
  EXPECT_GE(pinned.numa_node(), 0);
  void* a = pinned.allocate(1000003, MemoryCategory::optimizer_states);
  std::memset(a, 1, 1000003);
  PinnedHostStatistics stats = pinned.statistics();
  EXPECT_EQ(stats.allocated_bytes.current, 1000003);  // no power-of-two rounding
  EXPECT_EQ(stats.reserved_bytes.current, 1003520);   // page-rounded (4 KiB pages)
  EXPECT_EQ(stats.category_allocated_bytes[category_index(MemoryCategory::optimizer_states)].current, 1000003);
  pinned.free(a);
  void* b = pinned.allocate(1000004);  // a different size: a new buffer
  void* c = pinned.allocate(1000003);  // the same size: the cached buffer
  EXPECT_EQ(c, a);
  EXPECT_NE(b, a);
  stats = pinned.statistics();
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.num_host_alloc, 2);
  pinned.free(b);
  pinned.free(c);
  pinned.empty_cache();
  stats = pinned.statistics();
  EXPECT_EQ(stats.reserved_bytes.current, 0);
  EXPECT_EQ(stats.num_host_free, 2);
  EXPECT_EQ(stats.allocated_bytes.peak, 2000007);
}

TEST(PinnedHostAllocator, RejectsForeignPointers) {
  PinnedHostAllocator pinned;
  int local = 0;
  EXPECT_THROW(pinned.free(&local), InvalidFreeError);
  EXPECT_EQ(pinned.allocate(0), nullptr);
}

TEST(PinnedHostAllocator, PagesAreLocked) {
  PinnedHostAllocator pinned;
  if (pinned.pinning() != "mlock") GTEST_SKIP() << "pinned through " << pinned.pinning();
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer intercepts mlock and ignores it";
#endif
  void* a = pinned.allocate(64 * 4096);
  unsigned char residency[64] = {};
  ASSERT_EQ(::mincore(a, 64 * 4096, residency), 0);
  for (unsigned char page : residency) EXPECT_TRUE(page & 1) << "a locked page is not resident";
  pinned.free(a);
}

}  // namespace
}  // namespace ferry
