// The memory parts of a training run's summary (ARCHITECTURE.md's contract): one device's memory, one
// rank's entry of `ranks` (its grid coordinates, peaks and traffic), the job's memory taken from its
// fullest rank, and what a run prints at its end.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/grid/process_grid.h"

namespace ferry {

// memory {peak_allocated, peak_reserved, at_peak, max_by_category, ...} of a device's allocator.
// `optimizer` is the optimizer's describe() (host pinned peak, NVMe bytes), or empty.
nlohmann::json memory_summary(const Device& device, const nlohmann::json& optimizer);

// This rank's entry of the summary's `ranks`: its coordinates and groups, its memory (as memory_summary
// says it), the bytes it sent, in all and per step.
nlohmann::json rank_entry(const ProcessGrid& grid, const Device& device, const nlohmann::json& optimizer, std::int64_t steps_run);

// Sets summary.ranks to `ranks`; the contract's memory peaks become the fullest rank's (the one that
// needs the largest device, named), its host, NVMe and allocator-failure figures the whole job's sums.
void merge_rank_entries(nlohmann::json& summary, nlohmann::json ranks);

// A line per rank: its coordinates, peaks, optimizer states, gradients, traffic and, on pipeline
// ranks, the activation stash.
void print_rank_lines(const nlohmann::json& ranks);

// The end of a run, on rank 0: the loss and rate, the memory at the fullest rank's peak, the model
// states beside ZeRO's formulas, fp16's scaler and the offload's figures, then a line per rank.
void print_training_result(const nlohmann::json& summary);

}  // namespace ferry
