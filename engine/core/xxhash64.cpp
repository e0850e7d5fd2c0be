// xxhash64: XXH64 (seed 0), written here from the published xxHash specification
// (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md): four 64-bit accumulators over
// 32-byte stripes, then the tail and an avalanche. Portable scalar code at about a byte per cycle,
// well above a drive's bandwidth; the result equals xxhsum -H1, so a file can be checked by hand.
#include "engine/core/xxhash64.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace ferry {
namespace {

constexpr std::uint64_t prime1 = 0x9E3779B185EBCA87ULL;
constexpr std::uint64_t prime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr std::uint64_t prime3 = 0x165667B19E3779F9ULL;
constexpr std::uint64_t prime4 = 0x85EBCA77C2B2AE63ULL;
constexpr std::uint64_t prime5 = 0x27D4EB2F165667C5ULL;

// Little-endian loads (the specification reads lanes little-endian; x86-64 and arm64 are).
std::uint64_t load64(const unsigned char* bytes) {
  std::uint64_t value = 0;
  std::memcpy(&value, bytes, sizeof value);
  if constexpr (std::endian::native == std::endian::big) value = __builtin_bswap64(value);
  return value;
}

std::uint32_t load32(const unsigned char* bytes) {
  std::uint32_t value = 0;
  std::memcpy(&value, bytes, sizeof value);
  if constexpr (std::endian::native == std::endian::big) value = __builtin_bswap32(value);
  return value;
}

std::uint64_t accumulate(std::uint64_t accumulator, std::uint64_t lane) {
  accumulator += lane * prime2;
  accumulator = std::rotl(accumulator, 31);
  return accumulator * prime1;
}

std::uint64_t merge(std::uint64_t hash, std::uint64_t accumulator) {
  hash ^= accumulate(0, accumulator);
  return hash * prime1 + prime4;
}

}  // namespace

std::uint64_t xxhash64(const void* data, std::size_t bytes) {
  const auto* cursor = static_cast<const unsigned char*>(data);
  const unsigned char* const end = cursor + bytes;
  std::uint64_t hash = 0;
  if (bytes >= 32) {
    std::uint64_t lane1 = prime1 + prime2;
    std::uint64_t lane2 = prime2;
    std::uint64_t lane3 = 0;
    std::uint64_t lane4 = 0 - prime1;
    const unsigned char* const last_stripe = end - 32;
    do {
      lane1 = accumulate(lane1, load64(cursor));
      lane2 = accumulate(lane2, load64(cursor + 8));
      lane3 = accumulate(lane3, load64(cursor + 16));
      lane4 = accumulate(lane4, load64(cursor + 24));
      cursor += 32;
    } while (cursor <= last_stripe);
    hash = std::rotl(lane1, 1) + std::rotl(lane2, 7) + std::rotl(lane3, 12) + std::rotl(lane4, 18);
    hash = merge(hash, lane1);
    hash = merge(hash, lane2);
    hash = merge(hash, lane3);
    hash = merge(hash, lane4);
  } else {
    hash = prime5;
  }
  hash += static_cast<std::uint64_t>(bytes);
  while (end - cursor >= 8) {
    hash ^= accumulate(0, load64(cursor));
    hash = std::rotl(hash, 27) * prime1 + prime4;
    cursor += 8;
  }
  if (end - cursor >= 4) {
    hash ^= static_cast<std::uint64_t>(load32(cursor)) * prime1;
    hash = std::rotl(hash, 23) * prime2 + prime3;
    cursor += 4;
  }
  while (cursor < end) {
    hash ^= static_cast<std::uint64_t>(*cursor) * prime5;
    hash = std::rotl(hash, 11) * prime1;
    ++cursor;
  }
  hash ^= hash >> 33;
  hash *= prime2;
  hash ^= hash >> 29;
  hash *= prime3;
  hash ^= hash >> 32;
  return hash;
}

std::string xxhash64_text(std::uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace ferry
