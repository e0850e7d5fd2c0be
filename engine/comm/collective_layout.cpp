#include "engine/comm/collective_layout.h"

#include <numeric>

namespace ferry {

void require_count_per_rank(std::span<const std::size_t> counts, int ranks, const std::string& context) {
  if (counts.size() != static_cast<std::size_t>(ranks)) {
    throw CommunicationError(context + ": " + std::to_string(counts.size()) + " counts for a group of " +
                             std::to_string(ranks) + " ranks (one count per rank)");
  }
}

std::size_t total_count(std::span<const std::size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

std::size_t block_offset(std::span<const std::size_t> counts, int rank) {
  return total_count(counts.first(static_cast<std::size_t>(rank)));
}

std::string describe_counts(std::span<const std::size_t> counts, CommDataType type) {
  std::string text;
  for (const std::size_t count : counts) text += (text.empty() ? "" : "+") + std::to_string(count);
  return text + " " + comm_data_type_name(type) + " (" + std::to_string(total_count(counts) * comm_data_type_size(type)) +
         " bytes)";
}

std::string describe_elements(std::size_t count, CommDataType type) {
  return std::to_string(count) + " " + comm_data_type_name(type) + " (" +
         std::to_string(count * comm_data_type_size(type)) + " bytes)";
}

std::uint64_t all_reduce_bytes_sent(std::size_t bytes, int ranks) {
  // floor(2 n (p - 1) / p) without overflowing 2 n (p - 1): n = q p + r.
  const auto p = static_cast<std::uint64_t>(ranks);
  const std::uint64_t quotient = bytes / p;
  const std::uint64_t remainder = bytes % p;
  return 2 * quotient * (p - 1) + 2 * remainder * (p - 1) / p;
}

std::uint64_t blocks_bytes_sent(std::span<const std::size_t> counts, int rank, CommDataType type) {
  return (total_count(counts) - counts[static_cast<std::size_t>(rank)]) * comm_data_type_size(type);
}

}  // namespace ferry
