// NvmeStore: round trips of random data at sizes from 1 byte to several MiB (odd tails padded on disk,
// the logical size kept, memory past the padding untouched), registered and unregistered buffers,
// more requests than the queue depth, chunk checksums, misuse and missing or truncated files.
#include "offload/nvme_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <string_view>

#include "tests/offload/nvme_test_support.h"

namespace ferry::offload {
namespace {

using testing::AlignedBuffer;
using testing::TemporaryDirectory;
using testing::fill_random;

constexpr std::size_t kibibyte = 1024;
constexpr std::size_t mebibyte = 1024 * kibibyte;

NvmeStoreOptions options_in(const TemporaryDirectory& directory, std::size_t chunk = 256 * kibibyte,
                            unsigned queue_depth = 8, bool register_buffers = true) {
  NvmeStoreOptions options;
  options.directory = directory.path() + "/store";
  options.chunk_bytes = chunk;
  options.queue_depth = queue_depth;
  options.register_buffers = register_buffers;
  return options;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

TEST(ChunkChecksum, EqualsXxh64ReferenceValues) {
  EXPECT_EQ(chunk_checksum("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(chunk_checksum("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(chunk_checksum("abc", 3), 0x44BC2CF5AD770999ULL);
  const std::string_view sentence = "Nobody inspects the spammish repetition";  // 39 bytes: stripes and tail
  EXPECT_EQ(chunk_checksum(sentence.data(), sentence.size()), 0xFBCEA83C8A378BF1ULL);
}

TEST(ChunkChecksum, ChangesWithEveryBitFlippedInAChunk) {
  std::vector<std::byte> data(4099);
  fill_random(data.data(), data.size(), 7);
  const std::uint64_t original = chunk_checksum(data.data(), data.size());
  for (std::size_t index : {std::size_t{0}, std::size_t{31}, std::size_t{2048}, data.size() - 1}) {
    data[index] ^= std::byte{1};
    EXPECT_NE(chunk_checksum(data.data(), data.size()), original) << "flipped byte " << index;
    data[index] ^= std::byte{1};
  }
  EXPECT_EQ(chunk_checksum(data.data(), data.size()), original);
}

TEST(NvmeStore, MakesItsDirectoryAndReportsAlignment) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory));
  EXPECT_TRUE(std::filesystem::is_directory(directory.path() + "/store"));
  EXPECT_GE(store.alignment(), 512u);
  EXPECT_EQ(store.alignment() & (store.alignment() - 1), 0u) << "a power of two";
  EXPECT_EQ(store.chunk_bytes(), 256 * kibibyte);
  EXPECT_EQ(store.directory(), directory.path() + "/store");
  EXPECT_EQ(store.bytes_on_disk(), 0u);
}

TEST(NvmeStore, RefusesAChunkThatIsNotAMultipleOfTheAlignment) {
  TemporaryDirectory directory;
  try {
    NvmeStore store(options_in(directory, 4096 + 100));  // not a multiple of any power of two >= 8
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_TRUE(contains(error.what(), "must be a multiple of")) << error.what();
  }
}

class RoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(RoundTrip, RandomDataAtSizesFromOneByteToSeveralMebibytes) {
  const bool registered = GetParam();
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory, 256 * kibibyte, 8, registered));
  const std::size_t alignment = store.alignment();
  const std::array<std::size_t, 12> sizes = {1,          511,        4095,           4096,
                                             4097,       65537,      256 * kibibyte - 1, 256 * kibibyte,
                                             256 * kibibyte + 1, mebibyte, 3 * mebibyte + 12345, 5 * mebibyte + 7};
  std::size_t largest = 0;
  for (std::size_t size : sizes) largest = std::max(largest, size);
  const std::size_t capacity = (largest + alignment - 1) / alignment * alignment;
  AlignedBuffer source(capacity, alignment);
  AlignedBuffer target(capacity, alignment);
  const std::array<std::span<std::byte>, 2> buffers = {std::span<std::byte>(source.data(), capacity),
                                                       std::span<std::byte>(target.data(), capacity)};
  store.register_buffers(buffers);

  std::uint64_t expected_on_disk = 0;
  for (std::size_t size : sizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::size_t padded = (size + alignment - 1) / alignment * alignment;
    const std::string name = "round_trip_" + std::to_string(size);
    const FileId file = store.create_file(name, size);
    expected_on_disk += padded;
    EXPECT_EQ(store.path(file), directory.path() + "/store/" + name);
    EXPECT_EQ(testing::file_size(store.path(file)), padded) << "size on disk is the padded size";
    EXPECT_EQ(store.bytes_on_disk(), expected_on_disk);

    fill_random(source.data(), size, size);
    store.wait(store.write_async(file, 0, source.data(), size));
    // The target's padding and everything after it hold a pattern the read must not spill past.
    std::memset(target.data(), 0x5C, capacity);
    store.wait(store.read_async(file, 0, target.data(), size));
    EXPECT_EQ(std::memcmp(source.data(), target.data(), size), 0);
    for (std::size_t index = padded; index < capacity; ++index) {
      ASSERT_EQ(target.data()[index], std::byte{0x5C}) << "read wrote past the padded length at " << index;
    }
    EXPECT_TRUE(target.canary_intact());
    EXPECT_EQ(testing::file_size(store.path(file)), padded) << "the file keeps its padded size after writing";
  }
  // Transfers may end at the logical end and not beyond it: the logical size is kept.
  const FileId odd = store.create_file("odd", 3 * mebibyte + 12345);
  EXPECT_THROW(store.write_async(odd, 3 * mebibyte, source.data(), 12345 + 1), NvmeError);
}

INSTANTIATE_TEST_SUITE_P(Buffers, RoundTrip, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& parameter) { return parameter.param ? "registered" : "unregistered"; });

TEST(NvmeStore, ManyRequestsBeyondTheQueueDepthAllComplete) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory, 64 * kibibyte, 4));
  constexpr std::size_t file_count = 8;
  constexpr std::size_t file_bytes = mebibyte + 4096 * 3 + 1;  // 17 pieces each, the last a padded tail
  const std::size_t slot = (file_bytes + store.alignment() - 1) / store.alignment() * store.alignment();
  AlignedBuffer source(slot * file_count, store.alignment());
  AlignedBuffer target(slot * file_count, store.alignment());
  std::vector<FileId> files;
  std::vector<IoRequest> writes;
  for (std::size_t index = 0; index < file_count; ++index) {
    files.push_back(store.create_file("many_" + std::to_string(index), file_bytes));
    fill_random(source.data() + index * slot, file_bytes, 100 + index);
  }
  // 136 pieces queued before any wait, 34 times the queue depth; halves of a file as separate requests.
  for (std::size_t index = 0; index < file_count; ++index) {
    writes.push_back(store.write_async(files[index], 0, source.data() + index * slot, mebibyte / 2));
    writes.push_back(store.write_async(files[index], mebibyte / 2, source.data() + index * slot + mebibyte / 2,
                                       file_bytes - mebibyte / 2));
  }
  store.wait(writes.back());  // waiting for the last one completes the earlier ones on the way
  store.wait_all();
  std::vector<IoRequest> reads;
  for (std::size_t index = file_count; index-- > 0;) {
    reads.push_back(store.read_async(files[index], 0, target.data() + index * slot, file_bytes));
  }
  for (IoRequest read : reads) store.wait(read);
  for (std::size_t index = 0; index < file_count; ++index) {
    EXPECT_EQ(std::memcmp(source.data() + index * slot, target.data() + index * slot, file_bytes), 0) << index;
  }
  EXPECT_TRUE(target.canary_intact());
}

TEST(NvmeStore, ChecksumCatchesAByteFlippedOnDiskBehindTheStoresBack) {
  TemporaryDirectory directory;
  const std::size_t chunk = 64 * kibibyte;
  NvmeStore store(options_in(directory, chunk));
  AlignedBuffer buffer(3 * chunk, store.alignment());
  fill_random(buffer.data(), 3 * chunk, 11);
  const FileId file = store.create_file("flipped", 3 * chunk);
  store.wait(store.write_async(file, 0, buffer.data(), 3 * chunk));
  testing::flip_byte_on_disk(store.path(file), chunk + 1000);
  store.wait(store.read_async(file, 0, buffer.data(), chunk));  // the first chunk is still good
  try {
    store.wait(store.read_async(file, 0, buffer.data(), 3 * chunk));
    FAIL() << "expected a checksum mismatch";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.path(), store.path(file));
    EXPECT_EQ(error.offset(), chunk) << "the offset of the chunk that changed";
    EXPECT_EQ(error.error_number(), 0);
    EXPECT_TRUE(contains(error.what(), "checksum mismatch in " + store.path(file) + " at offset 65536")) << error.what();
    EXPECT_TRUE(contains(error.what(), "chunk written at ")) << error.what();
  }
}

TEST(NvmeStore, ReadingAChunkNeverWrittenIsAnError) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory, 64 * kibibyte));
  AlignedBuffer buffer(128 * kibibyte, store.alignment());
  const FileId file = store.create_file("unwritten", 128 * kibibyte);
  store.wait(store.write_async(file, 0, buffer.data(), 64 * kibibyte));
  try {
    store.wait(store.read_async(file, 0, buffer.data(), 128 * kibibyte));
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.offset(), 64 * kibibyte);
    EXPECT_TRUE(contains(error.what(), "never written")) << error.what();
  }
}

TEST(NvmeStore, MisalignedBufferOffsetAndLengthSayWhichAlignmentIsNeeded) {
  TemporaryDirectory directory;
  const std::size_t chunk = 64 * kibibyte;
  AlignedBuffer buffer(2 * chunk + 4096, 4096);
  const auto expect_refused = [&](auto&& transfer, std::string_view reason) {
    NvmeStore store(options_in(directory, chunk));
    const FileId file = store.create_file("misaligned", 2 * chunk);
    try {
      transfer(store, file);
      FAIL() << "expected NvmeError for " << reason;
    } catch (const NvmeError& error) {
      EXPECT_EQ(error.error_number(), 0);
      EXPECT_EQ(error.path(), store.path(file));
      EXPECT_TRUE(contains(error.what(), reason)) << error.what();
      EXPECT_TRUE(contains(error.what(), std::to_string(store.alignment()) + "-byte alignment")) << error.what();
    }
  };
  expect_refused([&](NvmeStore& store, FileId file) { store.write_async(file, 0, buffer.data() + 1, chunk); },
                 "misaligned buffer");
  expect_refused([&](NvmeStore& store, FileId file) {
                   store.read_async(file, 0, buffer.data() + store.alignment() / 2, chunk);
                 },
                 "misaligned buffer");
  expect_refused([&](NvmeStore& store, FileId file) { store.write_async(file, 4096, buffer.data(), chunk); },
                 "misaligned offset");
  expect_refused([&](NvmeStore& store, FileId file) { store.write_async(file, 0, buffer.data(), chunk + 4096); },
                 "misaligned length");
}

TEST(NvmeStore, ReadBeyondTheLogicalEndNamesFileAndOffset) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory, 64 * kibibyte));
  AlignedBuffer buffer(256 * kibibyte, store.alignment());
  const FileId file = store.create_file("short", 100000);
  try {
    store.read_async(file, 64 * kibibyte, buffer.data(), 128 * kibibyte);
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.path(), store.path(file));
    EXPECT_EQ(error.offset(), 64 * kibibyte);
    EXPECT_TRUE(contains(error.what(), "beyond the file's logical end at 100000")) << error.what();
  }
}

TEST(NvmeStore, MissingFileIsAnError) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory));
  try {
    store.open_file("absent", 4096);
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), ENOENT);
    EXPECT_EQ(error.path(), directory.path() + "/store/absent");
    EXPECT_TRUE(contains(error.what(), "does not exist")) << error.what();
  }
}

TEST(NvmeStore, FileShorterThanAskedIsAnErrorAtOpen) {
  TemporaryDirectory directory;
  {
    NvmeStore store(options_in(directory));
    store.create_file("small", 8192);
  }
  NvmeStore store(options_in(directory));
  EXPECT_NO_THROW(store.open_file("small", 8192));
  NvmeStore other(options_in(directory));
  try {
    other.open_file("small", 100000);
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.path(), directory.path() + "/store/small");
    EXPECT_EQ(error.offset(), 8192u) << "where the data ends";
    EXPECT_TRUE(contains(error.what(), "truncated")) << error.what();
  }
}

TEST(NvmeStore, FileTruncatedBehindTheStoresBackIsAnErrorAtRead) {
  TemporaryDirectory directory;
  const std::size_t chunk = 64 * kibibyte;
  NvmeStore store(options_in(directory, chunk));
  AlignedBuffer buffer(4 * chunk, store.alignment());
  const FileId file = store.create_file("shrinks", 4 * chunk);
  store.wait(store.write_async(file, 0, buffer.data(), 4 * chunk));
  ASSERT_EQ(::truncate(store.path(file).c_str(), static_cast<off_t>(chunk + 4096)), 0);
  try {
    store.wait(store.read_async(file, 0, buffer.data(), 4 * chunk));
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.path(), store.path(file));
    EXPECT_EQ(error.offset(), chunk + 4096) << "where the file now ends";
    EXPECT_TRUE(contains(error.what(), "truncated")) << error.what();
  }
}

TEST(NvmeStore, RecreatingAFileKeepsItsIdAndForgetsItsChecksums) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory, 64 * kibibyte));
  AlignedBuffer buffer(128 * kibibyte, store.alignment());
  const FileId file = store.create_file("again", 128 * kibibyte);
  store.wait(store.write_async(file, 0, buffer.data(), 128 * kibibyte));
  EXPECT_EQ(store.create_file("again", 5000), file);
  const std::uint64_t padded = (5000 + store.alignment() - 1) / store.alignment() * store.alignment();
  EXPECT_EQ(store.bytes_on_disk(), padded);
  EXPECT_EQ(testing::file_size(store.path(file)), padded);
  EXPECT_THROW(store.wait(store.read_async(file, 0, buffer.data(), 5000)), NvmeError);
}

TEST(NvmeStore, DestructorDrainsInFlightWritesAndKeepsTheFiles) {
  TemporaryDirectory directory;
  std::string path;
  AlignedBuffer buffer(4 * mebibyte, 4096);
  fill_random(buffer.data(), 4 * mebibyte, 3);
  {
    NvmeStore store(options_in(directory, 256 * kibibyte, 4));
    const FileId file = store.create_file("kept", 4 * mebibyte);
    path = store.path(file);
    store.write_async(file, 0, buffer.data(), 4 * mebibyte);  // never waited for
  }
  EXPECT_EQ(testing::file_size(path), 4 * mebibyte);
  std::vector<std::byte> on_disk(4 * mebibyte);
  const int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(descriptor, 0);
  ASSERT_EQ(::pread(descriptor, on_disk.data(), on_disk.size(), 0), static_cast<ssize_t>(on_disk.size()));
  ::close(descriptor);
  EXPECT_EQ(std::memcmp(on_disk.data(), buffer.data(), on_disk.size()), 0) << "every queued write reached the file";
}

TEST(NvmeStore, ZeroByteFilesAndTransfers) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory));
  const FileId file = store.create_file("empty", 0);
  EXPECT_EQ(testing::file_size(store.path(file)), 0u);
  EXPECT_EQ(store.bytes_on_disk(), 0u);
  store.wait(store.write_async(file, 0, nullptr, 0));
  store.wait(store.read_async(file, 0, nullptr, 0));
}

}  // namespace
}  // namespace ferry::offload
