// The fuzz target under g++: the seed snapshots, then thousands of mutations of them (bytes flipped,
// runs deleted, duplicated or cut short, opcodes and lengths overwritten) go through the whole reader;
// each must be accepted or refused with a typed error. Under the sanitizer build this is a fuzzer.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "tests/fuzz/snapshot_fuzz_input.h"
#include "tests/snapshot/pickle_test_support.h"

namespace ferry {
namespace {

std::string read_seed(const std::string& name) {
  std::ifstream input(testing::snapshot_data_directory() + "/" + name, std::ios::binary);
  std::stringstream buffer;
  buffer << input.rdbuf();
  return buffer.str();
}

std::string mutate(std::string data, std::mt19937_64& random) {
  const int edits = 1 + static_cast<int>(random() % 4);
  for (int e = 0; e < edits && !data.empty(); ++e) {
    const std::size_t at = random() % data.size();
    switch (random() % 6) {
      case 0: data[at] = static_cast<char>(random()); break;
      case 1: data[at] ^= static_cast<char>(1u << (random() % 8)); break;
      case 2: data.erase(at, 1 + random() % 16); break;
      case 3: data.insert(at, data.substr(at, 1 + random() % 64)); break;
      case 4: data.resize(at); break;
      default:  // a length or count argument made huge
        for (std::size_t k = at; k < std::min(data.size(), at + 4); ++k) data[k] = '\xff';
    }
  }
  return data;
}

TEST(SnapshotFuzz, SeedsAreAccepted) {
  for (const char* seed : {"training.pickle", "ring.pickle", "expandable.pickle"}) EXPECT_TRUE(fuzz::read_snapshot_bytes(read_seed(seed))) << seed;
}

TEST(SnapshotFuzz, MutationsAreAcceptedOrRefusedWithATypedError) {
  std::mt19937_64 random(20240521);
  std::size_t accepted = 0, total = 0;
  for (const char* seed : {"training.pickle", "ring.pickle", "expandable.pickle"}) {
    const std::string data = read_seed(seed);
    ASSERT_FALSE(data.empty()) << seed;
    for (int i = 0; i < 3000; ++i, ++total) {
      if (fuzz::read_snapshot_bytes(mutate(data, random))) ++accepted;
    }
  }
  // Most mutations break something; some (a changed digit in a time or a frame's line) do not.
  EXPECT_LT(accepted, total);
  EXPECT_GT(accepted, 0u);
}

}  // namespace
}  // namespace ferry
