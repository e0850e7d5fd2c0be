// PartitionedParameters: ZeRO stage 3's parameter provider. Each data-parallel rank keeps only its
// partition of the flat parameter space (the elements its gradients and optimizer state cover) in the
// parameters' dtype; a layer's parameters are all-gathered from every rank into buffers of their own
// (category parameters) before it runs and freed when it releases them. The next layer's gather starts
// while this one computes (one prefetch at most), so what is gathered at once is a formula of the plan,
// whatever the timing: the layer running, the one prefetched, and (reshard_after_forward off, FSDP2's
// option) every block kept gathered from its forward to its backward, within the GatherPolicy's bounds
// (DeepSpeed's stage3_prefetch_bucket_size and stage3_max_live_parameters). With a ParameterHome (parameter
// offload) the partition is not on the device: the rank's slice of a layer is fetched from the home into
// the gather buffer, and the home reads ahead the layers that followed the prefetched one last step, as
// many as its buffers hold (the plan runs the same layers in the same order every step).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/parameter_provider.h"
#include "engine/core/tensor.h"
#include "engine/grid/flat_layout.h"
#include "engine/grid/gather_policy.h"
#include "models/gpt_parameters.h"
#include "engine/core/parameter_home.h"

namespace ferry {

class PartitionedParameters final : public ParameterProvider {
 public:
  // `parameters` in the layout's order; `owned` this rank's shards of `layout` (cut to the parameters).
  // `home`: where the partition lives when it is offloaded (null: on the device).
  PartitionedParameters(Device& device, std::vector<ParameterSpec> parameters, DType dtype, const FlatLayout& layout, FlatShards owned,
                        Communicator& dp, GatherPolicy policy, ParameterHome* home = nullptr);
  ~PartitionedParameters() override;
  PartitionedParameters(const PartitionedParameters&) = delete;
  PartitionedParameters& operator=(const PartitionedParameters&) = delete;

  // This rank's values on the device, [owned.size()] in the parameters' dtype, its shards end to end (what the optimizer updates
  // in place). Throws where the partition lives in a home.
  const Tensor& partition() const;
  // The device bytes the partition holds (0 where it lives in a home).
  std::int64_t partition_bytes() const;
  const GatherPolicy& policy() const { return policy_; }

  std::vector<Tensor> acquire(std::span<const std::size_t> indices) override;
  void prefetch(std::span<const std::size_t> indices) override;
  void release(std::span<const std::size_t> indices, bool again) override;
  // Frees everything gathered (the values are stale once the optimizer has stepped the partition).
  void release_all();

  // The bytes a gather of `indices` allocates (its buffers, each rounded as the allocator rounds it).
  std::int64_t gathered_bytes(std::span<const std::size_t> indices) const;
  // How many gathers started since construction (every rank the same).
  std::int64_t gathers() const { return gathers_; }
  // Seconds blocked in acquire() waiting for gathers (the part of the traffic compute did not hide),
  // since begin_step().
  double wait_seconds() const { return wait_seconds_; }
  // Seconds spent fetching this rank's slices from the home (the part of its reads not done ahead).
  double fetch_seconds() const { return fetch_seconds_; }
  void begin_step();

 private:
  struct Gathered {
    std::vector<std::size_t> indices;
    std::vector<Tensor> buffers;  // one per run of consecutive parameters
    std::vector<Tensor> views;    // one per index, shaped
    std::vector<std::unique_ptr<CommRequest>> requests;
    std::int64_t elements = 0;  // of the parameters gathered
    // Prefetched (started, not yet asked for), acquired by a layer, or kept between a block's forward
    // and its backward (reshard_after_forward off).
    enum class State : std::uint8_t { prefetched, acquired, kept } state = State::prefetched;
  };
  // Runs of consecutive layout positions among `indices`, each inside one unit of the layout (a gather
  // is one collective, each rank's share of it contiguous).
  std::vector<std::pair<std::size_t, std::size_t>> runs(std::span<const std::size_t> indices) const;
  Gathered start_gather(std::span<const std::size_t> indices);
  Gathered* find(std::span<const std::size_t> indices);
  // Elements gathered beyond the layers running: kept for a backward, or prefetched (what the policy bounds).
  std::int64_t held_beyond_running() const;
  std::int64_t elements_of(std::span<const std::size_t> indices) const;
  // The home reads ahead the layers that followed prefetch `position` last step (from the prefetched
  // layer itself when its gather did not start).
  void read_ahead(std::size_t position, std::span<const std::size_t> indices, bool gathering);
  void erase(std::span<const std::size_t> indices);
  // The home's ranges of this rank's slices of `indices`.
  std::vector<ElementRange> owned_ranges(std::span<const std::size_t> indices) const;

  Device& device_;
  std::vector<ParameterSpec> parameters_;
  std::vector<std::size_t> positions_;  // [model index] -> layout position
  DType dtype_;
  const FlatLayout& layout_;
  FlatShards owned_;
  Communicator& dp_;
  GatherPolicy policy_;
  ParameterHome* home_;
  Tensor partition_;
  std::vector<Gathered> gathered_;
  // The layers prefetched this step and last step, in order: the plan runs the same layers in the same
  // order every step, so a home reads ahead the layers that followed this one last step.
  std::vector<std::vector<std::size_t>> prefetched_;
  static constexpr std::size_t kReadAheadLayers = 16;  // asked of the home, which reads what its buffers hold
  std::vector<std::vector<std::size_t>> last_step_prefetched_;
  std::int64_t gathers_ = 0;
  double wait_seconds_ = 0;
  double fetch_seconds_ = 0;
};

}  // namespace ferry
