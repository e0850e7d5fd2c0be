// FERRY_ALLOC_CONF parsing: PyTorch's keys and syntax; unknown keys and bad values name themselves.
#include <gtest/gtest.h>

#include <cstdlib>

#include "allocator/allocator_config.h"
#include "allocator/allocator_errors.h"

namespace ferry {
namespace {

std::string error_of(const std::string& text) {
  try {
    AllocatorConfig::parse(text);
  } catch (const AllocatorConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(AllocatorConfig, ParsesEveryKey) {
  const AllocatorConfig config = AllocatorConfig::parse(
      "expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.8,"
      "roundup_power2_divisions:[1:2,64:4,>:8],trace_entries:1000");
  EXPECT_TRUE(config.expandable_segments);
  EXPECT_EQ(config.max_split_size, 128u << 20);
  EXPECT_DOUBLE_EQ(config.garbage_collection_threshold, 0.8);
  EXPECT_EQ(config.roundup_power2_divisions[0], 2u);
  EXPECT_EQ(config.roundup_power2_divisions[5], 2u);   // 32 MiB band: previous entry
  EXPECT_EQ(config.roundup_power2_divisions[6], 4u);   // 64 MiB
  EXPECT_EQ(config.roundup_power2_divisions[7], 8u);
  EXPECT_EQ(config.roundup_power2_divisions[15], 8u);
  EXPECT_EQ(config.trace_entries, 1000u);
  EXPECT_EQ(AllocatorConfig::parse(config.to_string()).to_string(), config.to_string());
}

TEST(AllocatorConfig, DefaultsAreOff) {
  const AllocatorConfig config = AllocatorConfig::parse("");
  EXPECT_FALSE(config.expandable_segments);
  EXPECT_FALSE(config.max_split_size_set());
  EXPECT_EQ(config.garbage_collection_threshold, 0.0);
  EXPECT_EQ(config.roundup_power2_divisions[3], 0u);
}

TEST(AllocatorConfig, ErrorsNameTheKeyOrValue) {
  EXPECT_NE(error_of("expandable_segment:True").find("unknown key 'expandable_segment'"), std::string::npos);
  EXPECT_NE(error_of("expandable_segments:maybe").find("'maybe' for expandable_segments"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb:10").find("max_split_size_mb"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb:lots").find("'lots'"), std::string::npos);
  EXPECT_NE(error_of("garbage_collection_threshold:1.5").find("garbage_collection_threshold"), std::string::npos);
  EXPECT_NE(error_of("roundup_power2_divisions:3").find("power of two"), std::string::npos);
  EXPECT_NE(error_of("roundup_power2_divisions:[100:2]").find("roundup_power2_divisions"), std::string::npos);
  EXPECT_NE(error_of("expandable_segments").find("not key:value"), std::string::npos);
}

TEST(AllocatorConfig, ReadsTheEnvironment) {
  ::setenv("FERRY_ALLOC_CONF", "expandable_segments:True", 1);
  EXPECT_TRUE(AllocatorConfig::from_environment().expandable_segments);
  ::setenv("FERRY_ALLOC_CONF", "bogus:1", 1);
  EXPECT_THROW(AllocatorConfig::from_environment(), AllocatorConfigError);
  ::unsetenv("FERRY_ALLOC_CONF");
  EXPECT_FALSE(AllocatorConfig::from_environment().expandable_segments);
}

}  // namespace
}  // namespace ferry
