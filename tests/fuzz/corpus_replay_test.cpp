// Every checked-in fuzz input (tests/fuzz/corpus/TARGET/*: seeds, and regression_* inputs that once
// crashed, hung or wrapped a number) through its target, in the ordinary build and under ASan + UBSan:
// the parsers' fixes stay fixed on machines without clang. A target's corpus must not be empty.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {
namespace {

using Target = int (*)(const std::uint8_t*, std::size_t);

std::size_t replay_corpus(const std::string& name, Target target) {
  const std::filesystem::path directory = std::filesystem::path(FERRY_FUZZ_CORPUS) / name;
  std::size_t inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    std::ifstream file(entry.path(), std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(target(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0);
    ++inputs;
  }
  return inputs;
}

TEST(FuzzCorpus, EveryInputOfEveryTargetIsHandled) {
  const std::vector<std::pair<std::string, Target>> targets = {{"alloc_conf", fuzz_alloc_conf}, {"byte_size", fuzz_byte_size},
                                                               {"json", fuzz_json},             {"rmm_trace", fuzz_rmm_trace},
                                                               {"safetensors", fuzz_safetensors}, {"schedule", fuzz_schedule},
                                                               {"snapshot", fuzz_snapshot},     {"config", fuzz_config},
                                                               {"profile", fuzz_profile},       {"token_shard", fuzz_token_shard},
                                                               {"trainer_state", fuzz_trainer_state}};
  for (const auto& [name, target] : targets) EXPECT_GT(replay_corpus(name, target), 0U) << name << ": an empty corpus";
}

}  // namespace
}  // namespace ferry::fuzz
