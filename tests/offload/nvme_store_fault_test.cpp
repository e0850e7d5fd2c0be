// NvmeStore under failure: injected ENOSPC, EIO, EINTR and short transfers (a one-off short transfer
// succeeds after a retry, a persistent one fails clearly), the store refusing work after a failure,
// wait() returning with requests in flight, and a real full file system (a small tmpfs).
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "offload/nvme_store.h"
#include "tests/offload/nvme_test_support.h"

namespace ferry::offload {
namespace {

using testing::AlignedBuffer;
using testing::TemporaryDirectory;
using testing::fill_random;

constexpr std::size_t chunk = 64 * 1024;

NvmeStoreOptions options_in(const std::string& directory, unsigned queue_depth = 4) {
  NvmeStoreOptions options;
  options.directory = directory;
  options.chunk_bytes = chunk;
  options.queue_depth = queue_depth;
  return options;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

struct Fixture {
  TemporaryDirectory directory;
  NvmeStore store{options_in(directory.path() + "/store")};
  AlignedBuffer source{8 * chunk, 4096};
  AlignedBuffer target{8 * chunk, 4096};
  FileId file = store.create_file("state", 8 * chunk);
  Fixture() { fill_random(source.data(), 8 * chunk, 42); }
  void expect_round_trip() {
    store.wait(store.write_async(file, 0, source.data(), 8 * chunk));
    store.wait(store.read_async(file, 0, target.data(), 8 * chunk));
    EXPECT_EQ(std::memcmp(source.data(), target.data(), 8 * chunk), 0);
  }
  void expect_refusal_naming(const NvmeError& first) {
    AlignedBuffer buffer(chunk, 4096);
    const auto expect_refused = [&](auto&& call, std::string_view what) {
      try {
        call();
        ADD_FAILURE() << what << " went on after a failure";
      } catch (const NvmeError& error) {
        EXPECT_TRUE(contains(error.what(), "refuses work after an earlier failure")) << what << ": " << error.what();
        EXPECT_TRUE(contains(error.what(), first.what())) << what << " names the first failure: " << error.what();
        EXPECT_EQ(error.path(), first.path());
      }
    };
    expect_refused([&] { store.write_async(file, 0, buffer.data(), chunk); }, "write_async");
    expect_refused([&] { store.read_async(file, 0, buffer.data(), chunk); }, "read_async");
    expect_refused([&] { store.wait_all(); }, "wait_all");
    expect_refused([&] { store.create_file("later", chunk); }, "create_file");
  }
};

// A hook that injects `fault` into `direction` transfers at `offset`, `times` times.
FaultInjector inject_at(IoDirection direction, std::uint64_t offset, IoFault fault, int times, int* asked = nullptr) {
  return [=](IoDirection which, const std::string&, std::uint64_t at, std::size_t) mutable -> std::optional<IoFault> {
    if (which != direction || at != offset) return std::nullopt;
    if (asked != nullptr) ++*asked;
    if (times == 0) return std::nullopt;
    --times;
    return fault;
  };
}

TEST(NvmeStoreFaults, InjectedEnospcOnWriteFailsNamingFileAndOffsetThenTheStoreRefusesWork) {
  Fixture fixture;
  fixture.store.set_fault_injector(inject_at(IoDirection::write, 3 * chunk, IoFault{ENOSPC, 0}, 1));
  try {
    fixture.store.wait(fixture.store.write_async(fixture.file, 0, fixture.source.data(), 8 * chunk));
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), ENOSPC);
    EXPECT_EQ(error.path(), fixture.store.path(fixture.file));
    EXPECT_EQ(error.offset(), 3 * chunk);
    EXPECT_TRUE(contains(error.what(), "No space left on device")) << error.what();
    EXPECT_TRUE(contains(error.what(), "offset 196608 of '" + fixture.store.path(fixture.file) + "'")) << error.what();
    fixture.expect_refusal_naming(error);
  }
}

TEST(NvmeStoreFaults, InjectedEioOnReadFails) {
  Fixture fixture;
  fixture.store.wait(fixture.store.write_async(fixture.file, 0, fixture.source.data(), 8 * chunk));
  fixture.store.set_fault_injector(inject_at(IoDirection::read, 5 * chunk, IoFault{EIO, 0}, 1));
  try {
    fixture.store.wait(fixture.store.read_async(fixture.file, 0, fixture.target.data(), 8 * chunk));
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), EIO);
    EXPECT_EQ(error.offset(), 5 * chunk);
    EXPECT_TRUE(contains(error.what(), "Input/output error")) << error.what();
    fixture.expect_refusal_naming(error);
  }
}

TEST(NvmeStoreFaults, InjectedEintrAndEagainAreRetried) {
  Fixture fixture;
  int asked = 0;
  fixture.store.set_fault_injector(inject_at(IoDirection::write, 2 * chunk, IoFault{EINTR, 0}, 2, &asked));
  fixture.expect_round_trip();
  EXPECT_EQ(asked, 3) << "two interrupted submissions, then the one that worked";
  fixture.store.set_fault_injector(inject_at(IoDirection::read, 0, IoFault{EAGAIN, 0}, 1));
  fixture.expect_round_trip();
}

TEST(NvmeStoreFaults, OneOffShortWriteAndReadSucceedAfterARetryOfTheRemainder) {
  for (IoDirection direction : {IoDirection::write, IoDirection::read}) {
    Fixture fixture;
    std::vector<std::pair<std::uint64_t, std::size_t>> asked;
    int shortened = 0;
    fixture.store.set_fault_injector([&](IoDirection which, const std::string&, std::uint64_t offset,
                                         std::size_t bytes) -> std::optional<IoFault> {
      if (which != direction || offset < chunk || offset >= 2 * chunk) return std::nullopt;
      asked.emplace_back(offset, bytes);
      if (shortened++ > 0) return std::nullopt;
      return IoFault{0, 5000};  // rounded up to the alignment: O_DIRECT lengths stay aligned
    });
    fixture.expect_round_trip();
    const std::size_t alignment = fixture.store.alignment();
    const std::size_t shortfall = (5000 + alignment - 1) / alignment * alignment;
    ASSERT_EQ(asked.size(), 2u);
    EXPECT_EQ(asked[0], std::make_pair(std::uint64_t{chunk}, chunk));
    EXPECT_EQ(asked[1], std::make_pair(std::uint64_t{2 * chunk - shortfall}, shortfall)) << "the remainder";
  }
}

TEST(NvmeStoreFaults, PersistentShortWriteFailsClearly) {
  Fixture fixture;
  fixture.store.set_fault_injector([](IoDirection which, const std::string&, std::uint64_t offset, std::size_t)
                                       -> std::optional<IoFault> {
    if (which != IoDirection::write || offset < 6 * chunk || offset >= 7 * chunk) return std::nullopt;
    return IoFault{0, 4096};  // every submission of this chunk moves 4 KiB less: it never finishes
  });
  try {
    fixture.store.wait(fixture.store.write_async(fixture.file, 0, fixture.source.data(), 8 * chunk));
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), 0);
    EXPECT_EQ(error.path(), fixture.store.path(fixture.file));
    EXPECT_EQ(error.offset(), 6 * chunk);
    const std::string expected = "short write: " + std::to_string(chunk - 4096) + " of " + std::to_string(chunk) +
                                 " bytes at offset " + std::to_string(6 * chunk) + " of " +
                                 fixture.store.path(fixture.file);
    EXPECT_TRUE(contains(error.what(), expected)) << error.what();
    fixture.expect_refusal_naming(error);
  }
}

TEST(NvmeStoreFaults, PersistentShortReadFailsClearly) {
  Fixture fixture;
  fixture.store.wait(fixture.store.write_async(fixture.file, 0, fixture.source.data(), 8 * chunk));
  fixture.store.set_fault_injector([](IoDirection which, const std::string&, std::uint64_t, std::size_t bytes)
                                       -> std::optional<IoFault> {
    if (which != IoDirection::read) return std::nullopt;
    return IoFault{0, bytes};  // nothing moves at all
  });
  try {
    fixture.store.wait(fixture.store.read_async(fixture.file, chunk, fixture.target.data(), chunk));
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.offset(), chunk);
    EXPECT_TRUE(contains(error.what(), "short read: 0 of 65536 bytes at offset 65536 of " + fixture.store.path(fixture.file)))
        << error.what();
  }
}

TEST(NvmeStoreFaults, WaitReturnsWhenAnotherRequestFailedWithTransfersInFlight) {
  TemporaryDirectory directory;
  NvmeStore store(options_in(directory.path() + "/store", 8));
  AlignedBuffer buffer(4 * 1024 * 1024, 4096);
  std::vector<FileId> files;
  for (int index = 0; index < 4; ++index) files.push_back(store.create_file("file" + std::to_string(index), 1 << 20));
  store.set_fault_injector([&](IoDirection, const std::string& path, std::uint64_t offset, std::size_t)
                               -> std::optional<IoFault> {
    if (path == store.path(files[1]) && offset == 3 * chunk) return IoFault{EIO, 0};
    return std::nullopt;
  });
  std::vector<IoRequest> requests;
  for (std::size_t index = 0; index < files.size(); ++index) {
    requests.push_back(store.write_async(files[index], 0, buffer.data() + index * (1 << 20), 1 << 20));
  }
  try {
    store.wait(requests[3]);  // a later request: the failure of request 2 must reach it, not a hang
    FAIL() << "expected NvmeError";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), EIO);
    EXPECT_EQ(error.path(), store.path(files[1]));
    EXPECT_EQ(error.offset(), 3 * chunk);
  }
  EXPECT_THROW(store.wait(requests[0]), NvmeError);
}

// Mounts a small tmpfs for the test's lifetime; unmounts it afterwards.
class SmallFileSystem {
 public:
  explicit SmallFileSystem(const std::string& directory) : directory_(directory) {
    if (::mount("tmpfs", directory.c_str(), "tmpfs", 0, "size=8m") == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallFileSystem() {
    if (mounted_) ::umount2(directory_.c_str(), MNT_DETACH);
  }
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string directory_;
  bool mounted_ = false;
  std::string error_;
};

TEST(NvmeStoreFaults, FullFileSystemRefusesCreateFileAndEarlierFilesStillReadBack) {
  TemporaryDirectory directory;
  SmallFileSystem file_system(directory.path());
  if (!file_system.mounted()) GTEST_SKIP() << "cannot mount an 8 MiB tmpfs (" << file_system.error() << ")";
  const std::size_t written_bytes = 3 * 1024 * 1024 + 12345;
  AlignedBuffer source(4 * 1024 * 1024, 4096);
  AlignedBuffer target(4 * 1024 * 1024, 4096);
  fill_random(source.data(), written_bytes, 9);
  NvmeStore store(options_in(directory.path() + "/store"));
  const FileId kept = store.create_file("kept", written_bytes);
  store.wait(store.write_async(kept, 0, source.data(), written_bytes));
  const std::uint64_t on_disk = store.bytes_on_disk();
  try {
    store.create_file("too_big", 16 * 1024 * 1024);
    FAIL() << "expected ENOSPC";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), ENOSPC);
    EXPECT_EQ(error.path(), directory.path() + "/store/too_big");
    EXPECT_TRUE(contains(error.what(), "cannot reserve 16777216 bytes")) << error.what();
    EXPECT_TRUE(contains(error.what(), "No space left on device")) << error.what();
    EXPECT_TRUE(contains(error.what(), "choose another --nvme-path")) << error.what();
  }
  EXPECT_FALSE(std::filesystem::exists(directory.path() + "/store/too_big")) << "no half file is left";
  EXPECT_EQ(store.bytes_on_disk(), on_disk);
  // A refused reservation moved no data: the store goes on and the earlier file reads back intact.
  store.wait(store.read_async(kept, 0, target.data(), written_bytes));
  EXPECT_EQ(std::memcmp(source.data(), target.data(), written_bytes), 0);
}

}  // namespace
}  // namespace ferry::offload
