// Training tokens and the order they are read in. TokenDataset holds a file's tokens: an llm.c shard
// (1024-byte header, magic 20240520, uint16 tokens; header and size validated) or plain text (one token
// per byte, vocab 256), or the corpus embedded in the binary. DataLoader cuts micro-batches of
// B*T+1 tokens, in file order or in a seeded shuffled order, with a position that checkpoints keep.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardMagicUint32 = 20240801;
inline constexpr std::size_t kShardHeaderBytes = 1024;

class TokenDataset {
 public:
  // A shard when the file starts with a shard magic, else plain text.
  static TokenDataset open(const std::string& path);
  // The small English corpus compiled into ferry (data/corpus/tiny-stories.txt).
  static TokenDataset embedded_corpus();
  static TokenDataset from_text(std::string name, std::string_view text);

  const std::string& name() const { return name_; }
  const std::string& format() const { return format_; }  // "llm.c shard" or "text"
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  const std::vector<std::uint16_t>& tokens() const { return tokens_; }
  // The largest token id + 1 the data needs (256 for text).
  std::int64_t vocab_needed() const { return vocab_needed_; }
  // What the data is, whatever its path: the token count and the XXH64 of the tokens (as 16-bit
  // little-endian words). A checkpoint records it; a resume on other data is refused.
  struct Identity {
    std::int64_t tokens = 0;
    std::uint64_t xxh64 = 0;
    bool operator==(const Identity&) const = default;
  };
  Identity identity() const;

 private:
  std::string name_;
  std::string format_;
  std::vector<std::uint16_t> tokens_;
  std::int64_t vocab_needed_ = 0;
};

// Micro-batch k of the epoch's order is window w = order[k]: tokens [w*B*T, (w+1)*B*T + 1); inputs are
// the first B*T, targets the same shifted by one. Sequential order is w = k; shuffled order is a
// permutation drawn from (seed, epoch). The position counts micro-batches read since the start.
class DataLoader {
 public:
  DataLoader(const TokenDataset& dataset, std::int64_t batch, std::int64_t sequence, bool shuffle, std::uint64_t seed);

  std::int64_t windows_per_epoch() const { return windows_; }
  std::uint64_t position() const { return position_; }
  void set_position(std::uint64_t position) { position_ = position; }
  // Fills B*T inputs and targets and advances.
  void next(std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets);

 private:
  std::int64_t window_at(std::uint64_t position);

  const TokenDataset* dataset_;
  std::int64_t batch_;
  std::int64_t sequence_;
  bool shuffle_;
  std::uint64_t seed_;
  std::int64_t windows_;
  std::uint64_t position_ = 0;
  std::int64_t order_epoch_ = -1;
  std::vector<std::int64_t> order_;
};

}  // namespace ferry
