// xxhash64: XXH64 (seed 0), written here from the published xxHash specification
// (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md): four 64-bit accumulators over
// 32-byte stripes, then the tail (under 32 bytes) and an avalanche; streamed, the tail waits in a buffer. Portable scalar code at about a byte per cycle,
// well above a drive's bandwidth; the result equals xxhsum -H1, so a file can be checked by hand.
#include "engine/core/xxhash64.h"

#include <algorithm>
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

void Xxhash64Stream::consume_stripe(const unsigned char* stripe) {
  for (int lane = 0; lane < 4; ++lane) lanes_[lane] = accumulate(lanes_[lane], load64(stripe + 8 * lane));
}

void Xxhash64Stream::update(const void* data, std::size_t bytes) {
  if (bytes == 0) return;  // data may be null: memcpy must not see it
  const auto* cursor = static_cast<const unsigned char*>(data);
  total_bytes_ += bytes;
  if (pending_bytes_ > 0) {  // complete the pending stripe first
    const std::size_t taken = std::min(bytes, sizeof pending_ - pending_bytes_);
    std::memcpy(pending_ + pending_bytes_, cursor, taken);
    pending_bytes_ += taken, cursor += taken, bytes -= taken;
    if (pending_bytes_ < sizeof pending_) return;
    consume_stripe(pending_);
    pending_bytes_ = 0;
  }
  for (; bytes >= sizeof pending_; cursor += sizeof pending_, bytes -= sizeof pending_) consume_stripe(cursor);
  std::memcpy(pending_, cursor, bytes);
  pending_bytes_ = bytes;
}

std::uint64_t Xxhash64Stream::digest() const {
  std::uint64_t hash = prime5;
  if (total_bytes_ >= 32) {
    hash = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) + std::rotl(lanes_[3], 18);
    for (const std::uint64_t lane : lanes_) hash = merge(hash, lane);
  }
  hash += total_bytes_;
  const unsigned char* cursor = pending_;
  const unsigned char* const end = pending_ + pending_bytes_;
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

std::uint64_t xxhash64(const void* data, std::size_t bytes) {
  Xxhash64Stream stream;
  stream.update(data, bytes);
  return stream.digest();
}

std::string xxhash64_text(std::uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace ferry
