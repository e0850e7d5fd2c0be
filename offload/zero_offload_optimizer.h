// ZeroOffloadOptimizer: AdamW with its fp32 state off the device (ZeRO-Offload). Gradients arrive in
// host memory bucket by bucket during backward (its HostGradients is the model's GradientSink); the
// step walks the state's sub-groups as a pipeline (read group i+1 while CpuAdam updates group i while
// group i-1 is written back) and returns the updated parameters to the device once every group is
// written, so a step that fails part-way leaves the device parameters and the step count as they were.
// With a ParameterHome (ZeRO-Infinity's parameter offload) the parameters live off the device: each
// sub-group's updated parameters are stored to the home as it finishes, through one sub-group of staging.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allocator/pinned_host_allocator.h"
#include "engine/core/tensor.h"
#include "offload/cpu_adam.h"
#include "offload/host_buffer.h"
#include "offload/host_gradients.h"
#include "offload/nvme_store.h"
#include "offload/optimizer_state_tier.h"
#include "offload/parameter_home.h"

namespace ferry::offload {

enum class OffloadDevice : std::uint8_t { cpu, nvme };

struct ZeroOffloadSettings {
  OffloadDevice device = OffloadDevice::cpu;
  std::string nvme_path;                 // nvme: the directory for the state file
  bool pin_memory = true;                // page-locked host buffers
  int buffer_count = 4;                  // nvme: host buffers of one sub-group each
  std::size_t buffer_pool_bytes = std::size_t{256} << 20;  // nvme: all buffers together; sub-groups sized to fit
  std::int64_t sub_group_elements = 0;   // 0: from the pool (nvme) or 16M elements (cpu)
  unsigned queue_depth = 32;
  std::size_t chunk_bytes = std::size_t{1} << 20;
  CpuAdamOptions adam;
};

struct OffloadedParameter {
  std::string name;
  const Tensor* parameter = nullptr;  // on the device: f32, bf16 or f16; null where a ParameterHome holds it
  bool decay = true;
  std::int64_t elements = 0;          // without `parameter`: its element count
};

// The element count of each parameter: the shape of the optimizer's HostGradients (a dry run's too).
std::vector<std::int64_t> numels_of(const std::vector<OffloadedParameter>& parameters);

// Seconds spent in the last step's phases and what was moved.
struct OffloadStepTimes {
  double step = 0;         // the whole pipelined update
  double adam = 0;         // in CpuAdam
  double read_wait = 0;    // waiting for sub-group reads
  double write_wait = 0;   // waiting for write-backs
  double copy_back = 0;    // updated parameters to the device
};

class ZeroOffloadOptimizer {
 public:
  // Master weights start as the device parameters converted to f32; moments start at zero. With `home`
  // (parameters end to end, in its dtype) there are no device parameters: the state starts at zero and
  // import_state() sets it and the home.
  ZeroOffloadOptimizer(Device& device, std::vector<OffloadedParameter> parameters, AdamWSettings settings,
                       ZeroOffloadSettings offload, ParameterHome* home = nullptr);
  ~ZeroOffloadOptimizer();

  HostGradients& gradients() { return *gradients_; }
  // Zeroes the host gradients: call before a step's first micro-batch.
  void begin_step();
  // The sum of squares of the host gradients (f64) and whether they are all finite, leaving out
  // parameters()[excluded] when given.
  GradientCheck check_gradients(std::optional<std::size_t> excluded = std::nullopt) const;
  // One pipelined AdamW step at `learning_rate` with gradients scaled by gradient_scale. Returns the step count.
  std::int64_t step(float learning_rate, float gradient_scale);

  std::int64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }
  std::int64_t total_elements() const { return gradients_->total(); }
  std::int64_t sub_group_elements() const { return tier_->group_elements(); }
  const std::vector<OffloadedParameter>& parameters() const { return parameters_; }
  // Flat copies of the whole state (parameters end to end), for checkpoints.
  void export_state(std::vector<float>& master, std::vector<float>& first_moment, std::vector<float>& second_moment);
  // The state a sub-group at a time, in order: `read(begin, count, master, first_moment, second_moment)` sees
  // elements [begin, begin + count) where they live (pinned host memory, or the NVMe tier's buffer), valid
  // only during the call: a checkpoint's writer never holds the whole state on the host.
  using GroupRead = std::function<void(std::int64_t begin, std::int64_t count, const float* master, const float* first_moment,
                                       const float* second_moment)>;
  void export_by_group(const GroupRead& read);
  // Replaces the state and sets the device parameters from the master weights (rounded to their dtype).
  void import_state(const std::vector<float>& master, const std::vector<float>& first_moment, const std::vector<float>& second_moment);
  // The same, a sub-group at a time: `fill(begin, count, master, first_moment, second_moment)` writes
  // elements [begin, begin + count) of the state into the group's buffers (no whole copy on the host).
  using GroupFill = std::function<void(std::int64_t begin, std::int64_t count, float* master, float* first_moment, float* second_moment)>;
  void import_by_group(const GroupFill& fill);

  std::string tier_name() const { return tier_->name(); }
  std::uint64_t nvme_bytes() const { return tier_->nvme_bytes(); }
  std::int64_t host_pinned_peak() const;
  std::int64_t gradients_received() const { return gradients_->bytes_received(); }
  const CpuAdam& adam() const { return *adam_; }
  const OffloadStepTimes& last_step_times() const { return times_; }
  // Tests: faults for the NVMe tier's transfers (std::logic_error on the cpu tier).
  void set_nvme_fault_injector(FaultInjector injector);

 private:
  // Group `state`'s updated parameters from staging to where the parameters live: the device, or the home.
  void return_parameters(const StateGroup& state);
  // Where group `state`'s parameters are staged: the whole staging buffer is laid out as the parameters
  // are, a home's is one sub-group.
  std::byte* staged(const StateGroup& state, std::int64_t element) const;
  // The copy stream waits for the work queued so far on the compute stream (kernels still reading the
  // parameters the copies overwrite).
  void copy_after_compute();
  std::vector<AdamWSpan> spans_of(const StateGroup& state) const;
  // Calls visit(parameter, first, last) for each parameter's flat range [first, last) inside the group.
  template <typename Visit>
  void for_each_segment(const StateGroup& state, Visit visit) const;

  Device& device_;
  std::vector<OffloadedParameter> parameters_;
  AdamWSettings settings_;
  DType parameter_dtype_;
  std::unique_ptr<PinnedHostAllocator> pinned_;
  std::unique_ptr<HostGradients> gradients_;
  std::unique_ptr<NvmeStore> store_;
  std::unique_ptr<OptimizerStateTier> tier_;
  std::unique_ptr<CpuAdam> adam_;
  ParameterHome* home_ = nullptr;
  HostBuffer staging_;  // updated parameters in the device dtype: flat, or one sub-group with a home
  Stream copy_stream_;
  std::int64_t steps_ = 0;
  OffloadStepTimes times_;
};

// "cpu" or "nvme"; throws std::invalid_argument naming the choices.
OffloadDevice parse_offload_device(const std::string& name);
// "cpu" or "nvme", as --offload-optimizer names them.
const char* offload_device_name(OffloadDevice device);

}  // namespace ferry::offload
