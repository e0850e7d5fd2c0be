// detect_rank_environment on fake environments: each launcher, the precedence mpirun > Slurm >
// torchrun, and values that cannot be right; FERRY_COMM_TIMEOUT_SECONDS the same way.
#include <gtest/gtest.h>

#include <stdexcept>

#include "engine/comm/communicator.h"
#include "engine/comm/host_staged_communicator.h"
#include "tests/comm/comm_test_support.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;
using testing::fake_lookup;
using testing::FakeVariable;

void expect_environment(const RankEnvironment& environment, const std::string& launcher, int rank, int world_size,
                        int local_rank) {
  EXPECT_EQ(environment.launcher, launcher);
  EXPECT_EQ(environment.rank, rank);
  EXPECT_EQ(environment.world_size, world_size);
  EXPECT_EQ(environment.local_rank, local_rank);
}

constexpr FakeVariable kNoLauncher[] = {{"HOME", "/root"}, {"LOCAL_RANK", "3"}};
constexpr FakeVariable kOpenMpi[] = {
    {"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
constexpr FakeVariable kHydra[] = {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "2"}};
constexpr FakeVariable kHydraWithoutLocalRank[] = {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}};
constexpr FakeVariable kSlurm[] = {{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"}};
constexpr FakeVariable kTorchrun[] = {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}};

TEST(RankEnvironment, NoLauncherIsRankZeroOfOne) {
  expect_environment(detect_rank_environment(fake_lookup<kNoLauncher>), "none", 0, 1, 0);
}

TEST(RankEnvironment, EachLauncher) {
  expect_environment(detect_rank_environment(fake_lookup<kOpenMpi>), "mpirun", 5, 8, 1);
  expect_environment(detect_rank_environment(fake_lookup<kHydra>), "mpirun", 2, 3, 2);
  expect_environment(detect_rank_environment(fake_lookup<kHydraWithoutLocalRank>), "mpirun", 2, 3, 0);
  expect_environment(detect_rank_environment(fake_lookup<kSlurm>), "slurm", 7, 16, 3);
  expect_environment(detect_rank_environment(fake_lookup<kTorchrun>), "torchrun", 1, 4, 1);
}

// The ranks sharing this machine (the cpu device's default memory is divided among them); the world
// size when the launcher does not say.
constexpr FakeVariable kOpenMpiLocalSize[] = {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
constexpr FakeVariable kTorchrunLocalSize[] = {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}};
constexpr FakeVariable kLocalSizeAtLocalRank[] = {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "1"}};

TEST(RankEnvironment, LocalSize) {
  EXPECT_EQ(detect_rank_environment(fake_lookup<kNoLauncher>).local_size, 1);
  EXPECT_EQ(detect_rank_environment(fake_lookup<kOpenMpi>).local_size, 8);
  EXPECT_EQ(detect_rank_environment(fake_lookup<kOpenMpiLocalSize>).local_size, 4);
  EXPECT_EQ(detect_rank_environment(fake_lookup<kTorchrunLocalSize>).local_size, 2);
  const std::string error = error_of<std::invalid_argument>([] { detect_rank_environment(fake_lookup<kLocalSizeAtLocalRank>); });
  EXPECT_TRUE(contains(error, "LOCAL_WORLD_SIZE='1'")) << error;
}

// mpirun inside a Slurm allocation inside a torchrun-style environment: mpirun's variables win.
constexpr FakeVariable kAllThree[] = {
    {"RANK", "0"},         {"WORLD_SIZE", "1"},           {"LOCAL_RANK", "0"},
    {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},         {"SLURM_LOCALID", "0"},
    {"PMI_RANK", "1"},     {"PMI_SIZE", "3"},             {"OMPI_COMM_WORLD_RANK", "3"},
    {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
constexpr FakeVariable kHydraAndSlurm[] = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"PMI_RANK", "1"},
                                           {"PMI_SIZE", "3"}};
constexpr FakeVariable kSlurmAndTorchrun[] = {{"RANK", "3"},          {"WORLD_SIZE", "4"},  {"LOCAL_RANK", "3"},
                                              {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}};

TEST(RankEnvironment, PrecedenceIsMpirunThenSlurmThenTorchrun) {
  expect_environment(detect_rank_environment(fake_lookup<kAllThree>), "mpirun", 3, 4, 1);
  expect_environment(detect_rank_environment(fake_lookup<kHydraAndSlurm>), "mpirun", 1, 3, 0);
  expect_environment(detect_rank_environment(fake_lookup<kSlurmAndTorchrun>), "slurm", 1, 2, 1);
}

// The error names the variable and its value.
template <const auto& kVariables>
void expect_rejected(const std::string& variable_and_value) {
  const std::string error =
      error_of<std::invalid_argument>([] { detect_rank_environment(fake_lookup<kVariables>); });
  EXPECT_TRUE(contains(error, variable_and_value)) << error;
}

constexpr FakeVariable kRankNotANumber[] = {{"OMPI_COMM_WORLD_RANK", "first"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
constexpr FakeVariable kRankWithTrailingText[] = {{"RANK", "1x"}, {"WORLD_SIZE", "2"}};
constexpr FakeVariable kEmptyWorldSize[] = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", ""}};
constexpr FakeVariable kRankAtWorldSize[] = {{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}};
constexpr FakeVariable kNegativeRank[] = {{"RANK", "-1"}, {"WORLD_SIZE", "4"}};
constexpr FakeVariable kZeroWorld[] = {{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}};
constexpr FakeVariable kNegativeLocalRank[] = {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "-2"}};
constexpr FakeVariable kLocalRankOutsideWorld[] = {
    {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}};
constexpr FakeVariable kWorldTooLarge[] = {{"RANK", "0"}, {"WORLD_SIZE", "4294967296"}};
constexpr FakeVariable kRankWithoutWorldSize[] = {{"SLURM_PROCID", "1"}};

TEST(RankEnvironment, BadValuesNameTheVariable) {
  expect_rejected<kRankNotANumber>("OMPI_COMM_WORLD_RANK='first'");
  expect_rejected<kRankWithTrailingText>("RANK='1x'");
  expect_rejected<kEmptyWorldSize>("SLURM_NTASKS=''");
  expect_rejected<kRankAtWorldSize>("SLURM_PROCID='4'");
  expect_rejected<kNegativeRank>("RANK='-1'");
  expect_rejected<kZeroWorld>("PMI_SIZE='0'");
  expect_rejected<kNegativeLocalRank>("LOCAL_RANK='-2'");
  expect_rejected<kLocalRankOutsideWorld>("OMPI_COMM_WORLD_LOCAL_RANK='2'");
  expect_rejected<kWorldTooLarge>("WORLD_SIZE='4294967296'");
  expect_rejected<kRankWithoutWorldSize>("SLURM_NTASKS");
}

constexpr FakeVariable kTimeoutFive[] = {{"FERRY_COMM_TIMEOUT_SECONDS", "5"}};
constexpr FakeVariable kTimeoutZero[] = {{"FERRY_COMM_TIMEOUT_SECONDS", "0"}};
constexpr FakeVariable kTimeoutNegative[] = {{"FERRY_COMM_TIMEOUT_SECONDS", "-3"}};
constexpr FakeVariable kTimeoutWithUnit[] = {{"FERRY_COMM_TIMEOUT_SECONDS", "5s"}};
constexpr FakeVariable kTimeoutHuge[] = {{"FERRY_COMM_TIMEOUT_SECONDS", "9223372036854775807"}};
// Past ~9.2e9 s, now + timeout in the steady clock's nanoseconds overflowed: every wait timed out at once.
constexpr FakeVariable kTimeoutPastClock[] = {{"FERRY_COMM_TIMEOUT_SECONDS", "9300000000"}};
constexpr FakeVariable kTimeoutYear[] = {{"FERRY_COMM_TIMEOUT_SECONDS", "31536000"}};

template <const auto& kVariables>
void expect_timeout_rejected(const std::string& variable_and_value) {
  const std::string error =
      error_of<std::invalid_argument>([] { comm_timeout_from_environment(fake_lookup<kVariables>); });
  EXPECT_TRUE(contains(error, variable_and_value)) << error;
}

TEST(CommTimeout, DefaultAndWholeSeconds) {
  EXPECT_EQ(comm_timeout_from_environment(fake_lookup<kNoLauncher>), std::chrono::seconds(300));
  EXPECT_EQ(comm_timeout_from_environment(fake_lookup<kTimeoutFive>), std::chrono::milliseconds(5000));
  expect_timeout_rejected<kTimeoutZero>("FERRY_COMM_TIMEOUT_SECONDS='0'");
  expect_timeout_rejected<kTimeoutNegative>("FERRY_COMM_TIMEOUT_SECONDS='-3'");
  expect_timeout_rejected<kTimeoutWithUnit>("FERRY_COMM_TIMEOUT_SECONDS='5s'");
  expect_timeout_rejected<kTimeoutHuge>("FERRY_COMM_TIMEOUT_SECONDS='9223372036854775807'");
  expect_timeout_rejected<kTimeoutPastClock>("from 1 to 31536000");
  EXPECT_EQ(comm_timeout_from_environment(fake_lookup<kTimeoutYear>), std::chrono::seconds(31536000));
}

constexpr FakeVariable kCollectivesNccl[] = {{"FERRY_CUDA_COLLECTIVES", "nccl"}};
constexpr FakeVariable kCollectivesHost[] = {{"FERRY_CUDA_COLLECTIVES", "host"}};
constexpr FakeVariable kCollectivesMisspelt[] = {{"FERRY_CUDA_COLLECTIVES", "Host"}};

TEST(CudaCollectives, NcclUnlessHostIsAsked) {
  EXPECT_EQ(cuda_collectives_from_environment(fake_lookup<kNoLauncher>), CudaCollectives::nccl);
  EXPECT_EQ(cuda_collectives_from_environment(fake_lookup<kCollectivesNccl>), CudaCollectives::nccl);
  EXPECT_EQ(cuda_collectives_from_environment(fake_lookup<kCollectivesHost>), CudaCollectives::host);
  const std::string error =
      error_of<std::invalid_argument>([] { cuda_collectives_from_environment(fake_lookup<kCollectivesMisspelt>); });
  EXPECT_TRUE(contains(error, "FERRY_CUDA_COLLECTIVES=Host is not a choice: nccl")) << error;
}

}  // namespace
}  // namespace ferry
