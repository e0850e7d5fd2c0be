#include "schedule/recompute_policy.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace ferry {

RecomputePolicy RecomputePolicy::parse(std::string_view text) {
  if (text == "none") return {RecomputeKind::none, 0};
  if (text == "full") return {RecomputeKind::full, 0};
  if (text == "selective") return {RecomputeKind::selective, 0};
  if (text == "auto") return {RecomputeKind::automatic, 0};
  for (const auto& [prefix, kind] : {std::pair{std::string_view("every:"), RecomputeKind::every},
                                     std::pair{std::string_view("first:"), RecomputeKind::first}}) {
    if (!text.starts_with(prefix)) continue;
    std::int64_t count = 0;
    const std::string_view digits = text.substr(prefix.size());
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
    if (error == std::errc() && end == digits.data() + digits.size() && count >= 1) return {kind, count};
  }
  throw std::invalid_argument("--checkpointing '" + std::string(text) +
                              "' is not one of none, full, selective, every:K, first:N (K, N >= 1), auto");
}

std::string RecomputePolicy::name() const {
  switch (kind) {
    case RecomputeKind::none: return "none";
    case RecomputeKind::full: return "full";
    case RecomputeKind::selective: return "selective";
    case RecomputeKind::every: return "every:" + std::to_string(every);
    case RecomputeKind::first: return "first:" + std::to_string(every);
    case RecomputeKind::automatic: return "auto";
  }
  return "?";
}

std::vector<BlockRecompute> RecomputePolicy::plan(std::int64_t layers) const {
  if (kind == RecomputeKind::automatic) throw std::logic_error("the auto recompute policy must be resolved before use");
  std::vector<BlockRecompute> result(static_cast<std::size_t>(layers), BlockRecompute::none);
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    BlockRecompute& block = result[static_cast<std::size_t>(layer)];
    if (kind == RecomputeKind::full) block = BlockRecompute::full;
    if (kind == RecomputeKind::selective) block = BlockRecompute::selective;
    if (kind == RecomputeKind::every && (layer + 1) % every == 0) block = BlockRecompute::full;
    if (kind == RecomputeKind::first && layer < every) block = BlockRecompute::full;
  }
  return result;
}

std::vector<RecomputePolicy> recompute_candidates(std::int64_t layers) {
  std::vector<RecomputePolicy> candidates{{RecomputeKind::none, 0}, {RecomputeKind::selective, 0}};
  for (std::int64_t count = 1; count < layers; ++count) candidates.push_back({RecomputeKind::first, count});
  candidates.push_back({RecomputeKind::full, 0});
  return candidates;
}

std::vector<RecomputePolicy> recompute_overview(std::int64_t layers) {
  std::vector<RecomputePolicy> overview{{RecomputeKind::none, 0}, {RecomputeKind::selective, 0}};
  std::int64_t previous = 0;
  for (std::int64_t quarter = 1; quarter <= 3; ++quarter) {
    const std::int64_t count = std::max<std::int64_t>(1, layers * quarter / 4);
    if (count == previous || count >= layers) continue;
    overview.push_back({RecomputeKind::first, count});
    previous = count;
  }
  overview.push_back({RecomputeKind::full, 0});
  return overview;
}

}  // namespace ferry
