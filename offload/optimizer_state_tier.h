// Where the fp32 optimizer state (master weights, first and second moments) of ZeRO-Offload lives,
// as sub-groups of the flat parameter space that the step visits in order: pinned host memory (all
// resident) or an NVMe file behind a pool of host buffers (read ahead, written behind).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "allocator/pinned_host_allocator.h"

namespace ferry::offload {

class NvmeStore;

// One sub-group's state in host memory, valid between acquire() and release().
struct StateGroup {
  std::int64_t begin = 0;  // first element (flat index)
  std::int64_t count = 0;
  float* master = nullptr;
  float* first_moment = nullptr;
  float* second_moment = nullptr;
};

class OptimizerStateTier {
 public:
  virtual ~OptimizerStateTier() = default;
  virtual std::string name() const = 0;  // "cpu" or "nvme"
  std::int64_t total() const { return total_; }
  std::int64_t group_elements() const { return group_elements_; }
  std::int64_t group_count() const { return (total_ + group_elements_ - 1) / group_elements_; }

  // Starts bringing group i into host memory (no-op where it is resident).
  virtual void prefetch(std::int64_t group) = 0;
  // Waits for group i and returns it.
  virtual StateGroup acquire(std::int64_t group) = 0;
  // Done with group i; when `dirty` (updated) it is written back, asynchronously where it has a home
  // elsewhere.
  virtual void release(std::int64_t group, bool dirty) = 0;
  // Waits until every write-back is done.
  virtual void flush() = 0;
  // Bytes of state in NVMe files (0 for host memory).
  virtual std::uint64_t nvme_bytes() const { return 0; }
  // Group i's first element and count (no state pointers).
  StateGroup bounds_of(std::int64_t group) const;

 protected:
  OptimizerStateTier(std::int64_t total, std::int64_t group_elements) : total_(total), group_elements_(group_elements) {}

 private:
  std::int64_t total_;
  std::int64_t group_elements_;
};

// All state in host memory (pinned unless pinned == nullptr), as three flat arrays.
std::unique_ptr<OptimizerStateTier> make_host_state_tier(std::int64_t total, std::int64_t group_elements,
                                                         PinnedHostAllocator* pinned);

// State in one file of `store` (removed with the tier: checkpoints hold the durable copy);
// `buffer_count` host buffers of one sub-group each (at least 2; 3 or more let a read, an update and
// a write overlap). A group never written reads as zeros.
std::unique_ptr<OptimizerStateTier> make_nvme_state_tier(NvmeStore& store, std::int64_t total, std::int64_t group_elements,
                                                         int buffer_count, PinnedHostAllocator* pinned);

}  // namespace ferry::offload
