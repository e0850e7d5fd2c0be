// XXH64 (engine/core/xxhash64.h, file_hash.h): the specification's value for no bytes, and the same hash
// whether the bytes come at once, in pieces of every size across the 32-byte stripes, or from a file read
// a chunk at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/file_hash.h"
#include "engine/core/xxhash64.h"

namespace ferry {
namespace {

std::vector<unsigned char> sample_bytes(std::size_t count) {
  std::vector<unsigned char> bytes(count);
  std::uint32_t state = 12345;
  for (unsigned char& byte : bytes) {
    state = state * 1664525u + 1013904223u;
    byte = static_cast<unsigned char>(state >> 24);
  }
  return bytes;
}

TEST(Xxhash64, NoBytesHashToTheSpecificationsValue) {
  EXPECT_EQ(xxhash64_text(xxhash64(nullptr, 0)), "ef46db3751d8e999");
  EXPECT_EQ(Xxhash64Stream{}.digest(), xxhash64(nullptr, 0));
}

// Values of the one-shot implementation that checkpoints were checked with (equal to xxhsum -H1).
TEST(Xxhash64, KnownBytesHashAsBefore) {
  const auto hash_of = [](std::size_t count) {
    const std::vector<unsigned char> bytes = sample_bytes(count);
    return xxhash64_text(xxhash64(bytes.data(), bytes.size()));
  };
  EXPECT_EQ(hash_of(3), "f919e068cb64d3c8");
  EXPECT_EQ(hash_of(32), "048e142e2b522191");
  EXPECT_EQ(hash_of(1000), "b84fc3f707f27751");
}

TEST(Xxhash64, PiecesOfAnySizeGiveTheWholeHash) {
  for (const std::size_t total : {std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33}, std::size_t{100}, std::size_t{1000}}) {
    const std::vector<unsigned char> bytes = sample_bytes(total);
    const std::uint64_t whole = xxhash64(bytes.data(), bytes.size());
    for (std::size_t piece = 1; piece <= 70; ++piece) {
      Xxhash64Stream stream;
      for (std::size_t at = 0; at < total; at += piece) stream.update(bytes.data() + at, std::min(piece, total - at));
      ASSERT_EQ(stream.digest(), whole) << total << " bytes in pieces of " << piece;
    }
  }
}

TEST(Xxhash64, AFileHashesAsItsBytes) {
  const std::string path = (std::filesystem::temp_directory_path() / "ferry_xxhash64_test.bin").string();
  const std::vector<unsigned char> bytes = sample_bytes((std::size_t{9} << 20) + 7);  // over two 4 MiB chunks
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_EQ(xxhash64_of_file(path), xxhash64(bytes.data(), bytes.size()));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ferry
