// File formats and training data: safetensors round trip and every kind of corrupt file; llm.c token
// shards and plain text; the DataLoader's sequential and shuffled window orders.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "engine/core/atomic_file.h"
#include "engine/core/dtype.h"
#include "engine/core/safetensors.h"
#include "engine/data/token_data.h"

namespace ferry {
namespace {

class TempDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "ferry_formats_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  std::filesystem::path directory_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(stream.good()) << path;
}

std::string little_endian_u64(std::uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// A safetensors file by hand: the header length, the JSON header, then `data_bytes` bytes of data.
std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  return little_endian_u64(header.size()) + header + std::string(data_bytes, '\x01');
}

template <typename Error>
void expect_error_mentioning(const std::string& path, const std::string& fragment) {
  try {
    SafetensorsFile file(path);
    ADD_FAILURE() << path << ": opened without error (" << file.entries().size() << " entries)";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << path << ": wrong exception type: " << error.what();
  }
}

// ---------------------------------------------------------------------------------------------------
// safetensors

using Safetensors = TempDirectory;

TEST_F(Safetensors, RoundTripsNamesShapesDtypesMetadataAndValues) {
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -7.0f};
  const std::vector<float> b_values = {1.5f, -2.0f, 0.25f, 3.0f};  // exact in bf16
  std::vector<std::uint16_t> b(b_values.size());
  convert_f32_to_bf16(b_values.data(), b.data(), b.size());
  const std::vector<float> c_values = {0.5f, -1.0f, 2.5f, 1024.0f};  // exact in f16
  std::vector<std::uint16_t> c(c_values.size());
  convert_f32_to_f16(c_values.data(), c.data(), c.size());
  const std::vector<std::int32_t> d = {7, -1, 2147483647};
  const float scalar = 42.0f;

  SafetensorsWriter writer;
  writer.add("z.first", DType::f32, {2, 3}, a.data());  // added first: its data comes first
  writer.add("b.bf16", DType::bf16, {2, 2}, b.data());
  writer.add("c.f16", DType::f16, {4}, c.data());
  writer.add("d.i32", DType::i32, {3}, d.data());
  writer.add("scalar", DType::f32, {}, &scalar);
  writer.set_metadata("format", "pt");
  writer.set_metadata("step", "12");
  EXPECT_THROW(writer.add("d.i32", DType::i32, {3}, d.data()), SafetensorsError);
  const std::string file_path = path("weights.safetensors");
  writer.write(file_path);

  const SafetensorsFile file(file_path);
  EXPECT_EQ(file.path(), file_path);
  ASSERT_EQ(file.entries().size(), 5u);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  EXPECT_EQ(file.find("missing"), nullptr);

  const SafetensorsEntry* first = file.find("z.first");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->dtype, DType::f32);
  EXPECT_EQ(first->shape, (Shape{2, 3}));
  EXPECT_EQ(first->begin, 0u);
  EXPECT_EQ(first->end, 24u);
  EXPECT_EQ(file.read_f32(*first), a);

  const SafetensorsEntry* bf16 = file.find("b.bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->dtype, DType::bf16);
  EXPECT_EQ(bf16->shape, (Shape{2, 2}));
  EXPECT_EQ(bf16->begin, 24u);
  EXPECT_EQ(file.read_f32(*bf16), b_values);
  std::vector<std::uint16_t> raw(4);
  file.read_raw(*bf16, raw.data());
  EXPECT_EQ(raw, b);

  const SafetensorsEntry* f16 = file.find("c.f16");
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->dtype, DType::f16);
  EXPECT_EQ(f16->shape, (Shape{4}));
  EXPECT_EQ(file.read_f32(*f16), c_values);

  const SafetensorsEntry* i32 = file.find("d.i32");
  ASSERT_NE(i32, nullptr);
  EXPECT_EQ(i32->dtype, DType::i32);
  std::vector<std::int32_t> ints(3);
  file.read_raw(*i32, ints.data());
  EXPECT_EQ(ints, d);
  EXPECT_THROW(file.read_f32(*i32), SafetensorsError);

  const SafetensorsEntry* zero_dimensional = file.find("scalar");
  ASSERT_NE(zero_dimensional, nullptr);
  EXPECT_EQ(zero_dimensional->shape, Shape{});
  EXPECT_EQ(zero_dimensional->numel(), 1);
  EXPECT_EQ(file.read_f32(*zero_dimensional), std::vector<float>{42.0f});

  // The header is padded to 8 bytes, as the format recommends.
  std::ifstream stream(file_path, std::ios::binary);
  unsigned char length[8];
  stream.read(reinterpret_cast<char*>(length), 8);
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | length[i];
  EXPECT_EQ(header % 8, 0u);
  EXPECT_EQ(std::filesystem::file_size(file_path), 8 + header + 24 + 8 + 8 + 12 + 4);
}

TEST_F(Safetensors, HandWrittenFileOpens) {
  // Control for the corrupt files below: the same construction, valid, opens.
  const std::string file = path("valid.safetensors");
  write_bytes(file, safetensors_bytes(R"({"__metadata__":{"k":"v"},"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 16));
  const SafetensorsFile opened(file);
  ASSERT_EQ(opened.entries().size(), 1u);
  EXPECT_EQ(opened.entries()[0].name, "t");
  EXPECT_EQ(opened.metadata().at("k"), "v");
}

TEST_F(Safetensors, TruncatedDataIsAnError) {
  const std::vector<float> values(16, 1.0f);
  SafetensorsWriter writer;
  writer.add("weight", DType::f32, {4, 4}, values.data());
  const std::string file = path("truncated.safetensors");
  writer.write(file);
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 4);
  expect_error_mentioning<SafetensorsError>(file, "weight");
}

TEST_F(Safetensors, TooShortFileIsAnError) {
  const std::string file = path("short.safetensors");
  write_bytes(file, "abc");
  expect_error_mentioning<SafetensorsError>(file, "8-byte");
}

TEST_F(Safetensors, HeaderLengthBeyondTheFileIsAnError) {
  const std::string file = path("long_header.safetensors");
  write_bytes(file, little_endian_u64(1000) + "{}");
  expect_error_mentioning<SafetensorsError>(file, "header length 1000");
  write_bytes(file, little_endian_u64(~std::uint64_t{0}) + "{}");  // no wrap-around either
  expect_error_mentioning<SafetensorsError>(file, "header length");
}

TEST_F(Safetensors, JsonGarbageIsAnError) {
  const std::string file = path("garbage.safetensors");
  write_bytes(file, safetensors_bytes("{\"t\": {\"dtype\": \"F32\", ", 0));
  expect_error_mentioning<SafetensorsError>(file, "JSON");
  write_bytes(file, safetensors_bytes("[1, 2, 3]", 0));
  expect_error_mentioning<SafetensorsError>(file, "object");
}

TEST_F(Safetensors, MalformedEntriesAreErrors) {
  const std::string file = path("entries.safetensors");
  struct Case {
    const char* header;
    std::size_t data;
    const char* fragment;
  };
  const Case cases[] = {
      {R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16, "data_offsets"},  // not the shape's bytes
      {R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,32]}})", 32, "data_offsets"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "data_offsets"},  // end before begin
      {R"({"t":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16, "F64"},         // unsupported dtype
      {R"({"t":{"dtype":"F32","shape":[2]}})", 8, "data_offsets"},                        // missing field
      {R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "non-negative"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8, "non-negative"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "truncated"},     // data past the end
      {R"({"__metadata__":{"k":1}})", 0, "__metadata__"},
  };
  for (const Case& each : cases) {
    SCOPED_TRACE(each.header);
    write_bytes(file, safetensors_bytes(each.header, each.data));
    expect_error_mentioning<SafetensorsError>(file, each.fragment);
  }
}

TEST_F(Safetensors, OverlappingRangesAreAnError) {
  const std::string file = path("overlap.safetensors");
  write_bytes(file, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                      12));
  expect_error_mentioning<SafetensorsError>(file, "overlap");
  // One range inside another.
  write_bytes(file, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                      32));
  expect_error_mentioning<SafetensorsError>(file, "overlap");
}

// An empty tensor between two overlapping ones must not hide the overlap.
TEST_F(Safetensors, OverlapHiddenBehindAnEmptyTensorIsAnError) {
  const std::string file = path("hidden_overlap.safetensors");
  write_bytes(file, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                                      R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                      R"("c":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                                      32));
  expect_error_mentioning<SafetensorsError>(file, "overlap");
}

// A shape whose element count overflows must not wrap around to a small size.
TEST_F(Safetensors, ShapeWhoseSizeOverflowsIsAnError) {
  const std::string file = path("overflow.safetensors");
  write_bytes(file, safetensors_bytes(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0));
  expect_error_mentioning<SafetensorsError>(file, "too large");
}

TEST_F(Safetensors, MissingFileIsAFileError) {
  expect_error_mentioning<FileError>(path("absent.safetensors"), "absent.safetensors");
}

// ---------------------------------------------------------------------------------------------------
// TokenDataset

using TokenData = TempDirectory;

std::string shard_bytes(std::int32_t magic, std::int32_t version, std::int32_t count, const std::vector<std::uint16_t>& tokens) {
  std::string bytes(kShardHeaderBytes, '\0');
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memcpy(bytes.data() + 8, &count, 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

template <typename Fn>
void expect_data_error(Fn&& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

TEST_F(TokenData, ShardRoundTrip) {
  const std::vector<std::uint16_t> tokens = {5, 0, 50256, 300, 7, 5};
  const std::string file = path("train.bin");
  write_bytes(file, shard_bytes(kShardMagic, 1, 6, tokens));
  const TokenDataset dataset = TokenDataset::open(file);
  EXPECT_EQ(dataset.format(), "llm.c shard");
  EXPECT_EQ(dataset.name(), file);
  EXPECT_EQ(dataset.size(), 6);
  EXPECT_EQ(dataset.tokens(), tokens);
  EXPECT_EQ(dataset.vocab_needed(), 50257);
}

TEST_F(TokenData, ShardOfTheWrongSizeIsAnError) {
  const std::vector<std::uint16_t> tokens = {1, 2, 3, 4, 5};
  const std::string file = path("bad.bin");
  write_bytes(file, shard_bytes(kShardMagic, 1, 6, tokens));  // one token short
  expect_data_error([&] { TokenDataset::open(file); }, "6 tokens");
  write_bytes(file, shard_bytes(kShardMagic, 1, 4, tokens));  // one token too many
  expect_data_error([&] { TokenDataset::open(file); }, "4 tokens");
  write_bytes(file, shard_bytes(kShardMagic, 1, 0, {}));
  expect_data_error([&] { TokenDataset::open(file); }, "0 tokens");
  write_bytes(file, shard_bytes(kShardMagic, 1, 5, tokens).substr(0, 100));  // shorter than the header
  expect_data_error([&] { TokenDataset::open(file); }, "1024-byte header");
  write_bytes(file, shard_bytes(kShardMagic, 2, 5, tokens));
  expect_data_error([&] { TokenDataset::open(file); }, "version 2");
}

TEST_F(TokenData, Uint32ShardIsAnError) {
  const std::string file = path("llama.bin");
  write_bytes(file, shard_bytes(kShardMagicUint32, 1, 2, {1, 0, 2, 0}));
  expect_data_error([&] { TokenDataset::open(file); }, "20240801");
  // Whatever the extension.
  const std::string text_name = path("llama.txt");
  write_bytes(text_name, shard_bytes(kShardMagicUint32, 1, 2, {1, 0, 2, 0}));
  expect_data_error([&] { TokenDataset::open(text_name); }, "20240801");
}

TEST_F(TokenData, BinWithTheWrongMagicIsAnError) {
  const std::string file = path("other.bin");
  write_bytes(file, shard_bytes(12345, 1, 2, {1, 2}));
  expect_data_error([&] { TokenDataset::open(file); }, "magic 12345");
}

TEST_F(TokenData, PlainTextIsByteTokens) {
  const std::string text = "Hi!\n\xc3\xa9";
  const std::string file = path("story.txt");
  write_bytes(file, text);
  const TokenDataset dataset = TokenDataset::open(file);
  EXPECT_EQ(dataset.format(), "text");
  EXPECT_EQ(dataset.vocab_needed(), 256);
  EXPECT_EQ(dataset.tokens(), (std::vector<std::uint16_t>{'H', 'i', '!', '\n', 0xc3, 0xa9}));
  const TokenDataset inline_text = TokenDataset::from_text("inline", text);
  EXPECT_EQ(inline_text.tokens(), dataset.tokens());
  EXPECT_EQ(inline_text.name(), "inline");
}

TEST_F(TokenData, MissingFileIsAnError) {
  expect_data_error([&] { TokenDataset::open(path("absent.bin")); }, "absent.bin");
}

TEST(TokenDataEmbedded, CorpusIsText) {
  const TokenDataset corpus = TokenDataset::embedded_corpus();
  EXPECT_EQ(corpus.format(), "text");
  EXPECT_EQ(corpus.vocab_needed(), 256);
  EXPECT_GT(corpus.size(), 10000);
}

// ---------------------------------------------------------------------------------------------------
// DataLoader

constexpr std::int64_t kB = 2, kT = 4, kWindow = kB * kT;

// Token i has value i (i < 256), so a window is recognised by its first input.
TokenDataset counting_dataset(std::int64_t count) {
  std::string text(static_cast<std::size_t>(count), '\0');
  for (std::int64_t i = 0; i < count; ++i) text[static_cast<std::size_t>(i)] = static_cast<char>(i);
  return TokenDataset::from_text("counting", text);
}

std::int64_t next_window(DataLoader& loader) {
  std::vector<std::int32_t> inputs, targets;
  loader.next(inputs, targets);
  EXPECT_EQ(inputs.size(), static_cast<std::size_t>(kWindow));
  EXPECT_EQ(targets.size(), static_cast<std::size_t>(kWindow));
  const std::int64_t window = inputs[0] / kWindow;
  EXPECT_EQ(inputs[0] % kWindow, 0);
  for (std::int64_t i = 0; i < kWindow; ++i) {
    EXPECT_EQ(inputs[static_cast<std::size_t>(i)], window * kWindow + i);
    EXPECT_EQ(targets[static_cast<std::size_t>(i)], window * kWindow + i + 1);
  }
  return window;
}

TEST(DataLoader, SequentialWindowsShiftTargetsAndWrap) {
  const TokenDataset dataset = counting_dataset(12 * kWindow + 1);  // exactly 12 windows: the last uses the last token
  DataLoader loader(dataset, kB, kT, false, 0);
  EXPECT_EQ(loader.windows_per_epoch(), 12);
  for (std::int64_t k = 0; k < 30; ++k) {
    EXPECT_EQ(next_window(loader), k % 12) << k;
    EXPECT_EQ(loader.position(), static_cast<std::uint64_t>(k + 1));
  }
  loader.set_position(5);
  EXPECT_EQ(next_window(loader), 5);
  EXPECT_EQ(DataLoader(counting_dataset(12 * kWindow), kB, kT, false, 0).windows_per_epoch(), 11);
  EXPECT_EQ(DataLoader(counting_dataset(kWindow + 1), kB, kT, false, 0).windows_per_epoch(), 1);
}

std::vector<std::int64_t> shuffled_order(const TokenDataset& dataset, std::uint64_t seed, std::int64_t count) {
  DataLoader loader(dataset, kB, kT, true, seed);
  std::vector<std::int64_t> order;
  for (std::int64_t k = 0; k < count; ++k) order.push_back(next_window(loader));
  return order;
}

TEST(DataLoader, ShuffledIsADeterministicPermutationPerEpoch) {
  const TokenDataset dataset = counting_dataset(12 * kWindow + 5);
  constexpr std::int64_t kWindows = 12, kEpochs = 3;
  const std::vector<std::int64_t> order = shuffled_order(dataset, 1, kWindows * kEpochs);
  EXPECT_EQ(shuffled_order(dataset, 1, kWindows * kEpochs), order);
  std::vector<std::int64_t> identity(kWindows);
  std::iota(identity.begin(), identity.end(), std::int64_t{0});
  std::vector<std::vector<std::int64_t>> epochs;
  for (std::int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    std::vector<std::int64_t> windows(order.begin() + epoch * kWindows, order.begin() + (epoch + 1) * kWindows);
    epochs.push_back(windows);
    std::sort(windows.begin(), windows.end());
    EXPECT_EQ(windows, identity) << "epoch " << epoch;
  }
  EXPECT_NE(epochs[0], identity) << "not shuffled";
  EXPECT_NE(epochs[0], epochs[1]) << "every epoch has the same order";
  EXPECT_NE(shuffled_order(dataset, 2, kWindows * kEpochs), order) << "the seed changes nothing";

  // A loader resumed at a position (as from a checkpoint) continues the same order.
  DataLoader resumed(dataset, kB, kT, true, 1);
  resumed.set_position(17);
  for (std::size_t k = 17; k < order.size(); ++k) EXPECT_EQ(next_window(resumed), order[k]) << k;
}

TEST(DataLoader, TooLittleDataIsAnError) {
  const TokenDataset dataset = counting_dataset(kWindow);  // one token short of a micro-batch
  expect_data_error([&] { DataLoader(dataset, kB, kT, false, 0); }, "--batch");
  expect_data_error([&] { DataLoader(dataset, kB, kT, true, 0); }, "9");
}

}  // namespace
}  // namespace ferry
