#include "engine/data/token_data.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string_view>

#include "engine/core/atomic_file.h"
#include "engine/core/xxhash64.h"
#include "engine/data/embedded_corpus.h"

namespace ferry {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw DataError("cannot open data file '" + path + "': " + std::strerror(errno));
  try {
    regular_file_size(path);  // not a directory or an endless device such as /dev/zero
  } catch (const FileError& error) {
    throw DataError(std::string("data file: ") + error.what());
  }
  std::string bytes((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  if (stream.bad()) throw DataError("reading data file '" + path + "' failed");
  return bytes;
}

std::int32_t header_word(const std::string& bytes, std::size_t index) {
  std::int32_t value = 0;
  std::memcpy(&value, bytes.data() + 4 * index, 4);
  return value;
}

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t x = (state += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

TokenDataset TokenDataset::from_text(std::string name, std::string_view text) {
  TokenDataset dataset;
  dataset.name_ = std::move(name);
  dataset.format_ = "text";
  dataset.tokens_.assign(reinterpret_cast<const unsigned char*>(text.data()),
                         reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  dataset.vocab_needed_ = 256;
  return dataset;
}

TokenDataset::Identity TokenDataset::identity() const {
  static_assert(std::endian::native == std::endian::little, "token identity hashes little-endian words");
  return {size(), xxhash64(tokens_.data(), tokens_.size() * sizeof(std::uint16_t))};
}

TokenDataset TokenDataset::embedded_corpus() { return from_text("embedded:tiny-stories.txt", embedded_corpus_text()); }

TokenDataset TokenDataset::open(const std::string& path) {
  const std::string bytes = read_file(path);
  const std::int32_t magic = bytes.size() >= 4 ? header_word(bytes, 0) : 0;
  if (magic == kShardMagicUint32) {
    throw DataError("'" + path + "' is an llm.c shard with uint32 tokens (magic 20240801, Llama-3); ferry reads GPT-2 shards (magic 20240520, uint16 tokens)");
  }
  if (magic != kShardMagic) {
    if (path.ends_with(".bin")) {
      throw DataError("'" + path + "' is not an llm.c token shard: magic " + std::to_string(magic) +
                      ", expected 20240520 (and plain-text data should not be named .bin)");
    }
    return from_text(path, bytes);
  }
  if (bytes.size() < kShardHeaderBytes) {
    throw DataError("'" + path + "' is a truncated llm.c shard: " + std::to_string(bytes.size()) + " bytes, shorter than the 1024-byte header");
  }
  const std::int32_t version = header_word(bytes, 1);
  const std::int64_t count = header_word(bytes, 2);
  if (version != 1) throw DataError("'" + path + "': llm.c shard version " + std::to_string(version) + " is not supported (expected 1)");
  const std::uint64_t expected = kShardHeaderBytes + 2 * static_cast<std::uint64_t>(count);
  if (count <= 0 || bytes.size() != expected) {
    throw DataError("'" + path + "': the header says " + std::to_string(count) + " tokens, so the file should be " +
                    std::to_string(expected) + " bytes, but it is " + std::to_string(bytes.size()) + " (truncated or corrupt shard)");
  }
  TokenDataset dataset;
  dataset.name_ = path;
  dataset.format_ = "llm.c shard";
  dataset.tokens_.resize(static_cast<std::size_t>(count));
  std::memcpy(dataset.tokens_.data(), bytes.data() + kShardHeaderBytes, 2 * static_cast<std::size_t>(count));
  std::uint16_t largest = 0;
  for (std::uint16_t token : dataset.tokens_) largest = token > largest ? token : largest;
  dataset.vocab_needed_ = std::int64_t{largest} + 1;
  return dataset;
}

DataLoader::DataLoader(const TokenDataset& dataset, std::int64_t batch, std::int64_t sequence, bool shuffle, std::uint64_t seed)
    : dataset_(&dataset), batch_(batch), sequence_(sequence), shuffle_(shuffle), seed_(seed) {
  const std::int64_t window = batch * sequence;
  windows_ = window > 0 ? (dataset.size() - 1) / window : 0;
  if (windows_ <= 0) {
    throw DataError("'" + dataset.name() + "' has " + std::to_string(dataset.size()) + " tokens, but one micro-batch needs " +
                    std::to_string(window + 1) + " (batch " + std::to_string(batch) + " x sequence " + std::to_string(sequence) +
                    " + 1); use a smaller --batch or --seq, or more data");
  }
}

std::int64_t DataLoader::window_at(std::uint64_t position) {
  const auto epoch = static_cast<std::int64_t>(position / static_cast<std::uint64_t>(windows_));
  const auto index = static_cast<std::int64_t>(position % static_cast<std::uint64_t>(windows_));
  if (!shuffle_) return index;
  if (epoch != order_epoch_) {
    order_.resize(static_cast<std::size_t>(windows_));
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
    std::uint64_t state = seed_ ^ (0x5851f42d4c957f2dull * static_cast<std::uint64_t>(epoch + 1));
    for (std::int64_t i = windows_ - 1; i > 0; --i) {  // Fisher-Yates with our own generator: same everywhere
      const auto j = static_cast<std::int64_t>(splitmix(state) % static_cast<std::uint64_t>(i + 1));
      std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
    }
    order_epoch_ = epoch;
  }
  return order_[static_cast<std::size_t>(index)];
}

void DataLoader::next(std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets) {
  const std::int64_t window = batch_ * sequence_;
  const std::int64_t start = window_at(position_) * window;
  inputs.resize(static_cast<std::size_t>(window));
  targets.resize(static_cast<std::size_t>(window));
  const std::vector<std::uint16_t>& tokens = dataset_->tokens();
  for (std::int64_t i = 0; i < window; ++i) {
    inputs[static_cast<std::size_t>(i)] = tokens[static_cast<std::size_t>(start + i)];
    targets[static_cast<std::size_t>(i)] = tokens[static_cast<std::size_t>(start + i + 1)];
  }
  ++position_;
}

}  // namespace ferry
