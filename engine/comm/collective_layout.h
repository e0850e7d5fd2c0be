// Where each rank's block lies in a variable-count collective (reduce_scatter, all_gather: one count
// per rank), the checks every backend makes on the counts, and the bytes each collective sends by the
// ring algorithm's figure (Communicator::bytes_sent). Private to engine/comm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/comm/communicator.h"

namespace ferry {

// Throws CommunicationError "`context`: N counts for a group of P ranks" unless counts has one entry
// per rank.
void require_count_per_rank(std::span<const std::size_t> counts, int ranks, const std::string& context);
std::size_t total_count(std::span<const std::size_t> counts);
// The element offset of `rank`'s block: sum(counts[0..rank)).
std::size_t block_offset(std::span<const std::size_t> counts, int rank);
// "2+0+4+5 f32 (44 bytes)": the counts and their bytes, for error messages.
std::string describe_counts(std::span<const std::size_t> counts, CommDataType type);
// "1000 f64 (8000 bytes)"
std::string describe_elements(std::size_t count, CommDataType type);

// The ring algorithm's bytes for this rank (see Communicator::bytes_sent).
std::uint64_t all_reduce_bytes_sent(std::size_t bytes, int ranks);
std::uint64_t blocks_bytes_sent(std::span<const std::size_t> counts, int rank, CommDataType type);

}  // namespace ferry
