#include "offload/zero_offload_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "allocator/byte_size.h"
#include "engine/core/op_recorder.h"

namespace ferry::offload {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Elements per sub-group. On nvme the host buffers (count x one sub-group's state, rounded up to whole
// I/O chunks) must fit buffer_pool_bytes: the budget of pinned, locked memory is a budget.
std::int64_t choose_group_elements(const ZeroOffloadSettings& offload, std::int64_t total) {
  if (offload.device != OffloadDevice::nvme) {
    const std::int64_t elements = offload.sub_group_elements > 0 ? offload.sub_group_elements : std::int64_t{16} << 20;
    return std::clamp<std::int64_t>(elements, 1, std::max<std::int64_t>(total, 1));
  }
  const std::size_t count = static_cast<std::size_t>(std::max(offload.buffer_count, 1));
  const std::size_t chunk = std::max<std::size_t>(offload.chunk_bytes, 1);
  const std::size_t state_bytes_per_element = 3 * sizeof(float);
  const std::size_t largest_region = offload.buffer_pool_bytes / count / chunk * chunk;
  if (largest_region < state_bytes_per_element) {
    throw std::invalid_argument("--offload-buffer-size " + format_bytes(offload.buffer_pool_bytes) + " cannot hold --offload-buffer-count " +
                                std::to_string(count) + " buffers of at least one " + format_bytes(chunk) +
                                " I/O chunk each: raise the size to " + format_bytes(count * chunk) + " or lower the count");
  }
  const auto fitting = static_cast<std::int64_t>(largest_region / state_bytes_per_element);
  if (offload.sub_group_elements <= 0) return std::clamp<std::int64_t>(fitting, 1, std::max<std::int64_t>(total, 1));
  const std::int64_t elements = std::clamp<std::int64_t>(offload.sub_group_elements, 1, std::max<std::int64_t>(total, 1));
  // Each sub-group's region is padded to whole I/O chunks: a sub-group of less than a chunk of state
  // would make the file mostly padding (1 element per group: a 1 MiB chunk for 12 bytes), so the file
  // is bounded by twice the state it holds.
  const auto chunk_elements = static_cast<std::int64_t>((chunk + state_bytes_per_element - 1) / state_bytes_per_element);
  if (elements < total && elements < chunk_elements) {
    throw std::invalid_argument("--offload-sub-group " + std::to_string(elements) + ": each sub-group's state (" +
                                format_bytes(static_cast<std::size_t>(elements) * state_bytes_per_element) + ") is padded on NVMe to a whole " +
                                format_bytes(chunk) + " I/O chunk, so the file would hold " +
                                format_bytes(static_cast<std::size_t>((total + elements - 1) / elements) * chunk) + " for " +
                                format_bytes(static_cast<std::size_t>(total) * state_bytes_per_element) + " of state; give at least " +
                                std::to_string(chunk_elements) + " elements (a chunk's worth), or 0 to size sub-groups from the buffers");
  }
  const std::size_t region = (static_cast<std::size_t>(elements) * state_bytes_per_element + chunk - 1) / chunk * chunk;
  if (region > largest_region) {
    throw std::invalid_argument("--offload-buffer-count " + std::to_string(count) + " buffers of one sub-group (--offload-sub-group " +
                                std::to_string(elements) + " elements, " + format_bytes(region) + " each) need " +
                                format_bytes(count * region) + " of host memory, past --offload-buffer-size " +
                                format_bytes(offload.buffer_pool_bytes) + ": lower the sub-group to at most " + std::to_string(fitting) +
                                " elements or the count, or raise --offload-buffer-size to " + format_bytes(count * region));
  }
  return elements;
}

}  // namespace

std::vector<std::int64_t> numels_of(const std::vector<OffloadedParameter>& parameters) {
  std::vector<std::int64_t> numels;
  for (const OffloadedParameter& each : parameters) numels.push_back(each.parameter != nullptr ? each.parameter->numel() : each.elements);
  return numels;
}

const char* offload_device_name(OffloadDevice device) { return device == OffloadDevice::nvme ? "nvme" : "cpu"; }

OffloadDevice parse_offload_device(const std::string& name) {
  if (name == "cpu") return OffloadDevice::cpu;
  if (name == "nvme") return OffloadDevice::nvme;
  throw std::invalid_argument("--offload-optimizer '" + name + "' is not one of none, cpu, nvme");
}

ZeroOffloadOptimizer::ZeroOffloadOptimizer(Device& device, std::vector<OffloadedParameter> parameters, AdamWSettings settings,
                                           ZeroOffloadSettings offload, ParameterHome* home)
    : device_(device), parameters_(std::move(parameters)), settings_(settings), home_(home), copy_stream_(device.create_stream()) {
  if (parameters_.empty()) throw std::invalid_argument("ZeroOffloadOptimizer: no parameters");
  if (!device.has_storage()) throw std::invalid_argument("ZeroOffloadOptimizer needs a device with storage (not meta)");
  parameter_dtype_ = home_ != nullptr ? home_->dtype() : parameters_.front().parameter->dtype();
  for (const OffloadedParameter& each : parameters_) {
    if ((each.parameter == nullptr) != (home_ != nullptr)) {
      throw std::invalid_argument("offloaded parameter '" + each.name + "' must live on the device or in the parameter home, not both");
    }
    if (each.parameter != nullptr && (each.parameter->dtype() != parameter_dtype_ || !each.parameter->is_contiguous())) {
      throw std::invalid_argument("offloaded parameters must share one dtype and be contiguous ('" + each.name + "' is not)");
    }
  }
  if (offload.pin_memory) pinned_ = std::make_unique<PinnedHostAllocator>();
  gradients_ = std::make_unique<HostGradients>(device, numels_of(parameters_), pinned_.get());
  const std::int64_t total = gradients_->total();
  const std::int64_t group_elements = choose_group_elements(offload, total);
  if (offload.device == OffloadDevice::nvme) {
    if (offload.nvme_path.empty()) throw std::invalid_argument("--offload-optimizer nvme needs --nvme-path DIR (a directory on an NVMe drive)");
    store_ = std::make_unique<NvmeStore>(nvme_store_options(offload.nvme_path, offload.queue_depth, offload.chunk_bytes));
    tier_ = make_nvme_state_tier(*store_, total, group_elements, offload.buffer_count, pinned_.get());
  } else {
    tier_ = make_host_state_tier(total, group_elements, pinned_.get());
  }
  adam_ = std::make_unique<CpuAdam>(offload.adam);
  if (home_ != nullptr && home_->elements() != total) {
    throw std::invalid_argument("a parameter home of " + std::to_string(home_->elements()) + " elements for " + std::to_string(total) + " parameters");
  }
  const std::int64_t staged_elements = home_ != nullptr ? group_elements : total;
  staging_ = HostBuffer(pinned_.get(), static_cast<std::size_t>(staged_elements) * dtype_size(parameter_dtype_), MemoryCategory::staging);
  if (home_ != nullptr) return;  // no device parameters: import_state() sets the state

  // Master weights from the device parameters.
  auto* staging = static_cast<std::byte*>(staging_.data());
  copy_after_compute();
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& parameter = *parameters_[i].parameter;
    device_.copy(staging + gradients_->offset_of(i) * static_cast<std::int64_t>(dtype_size(parameter_dtype_)), parameter.data(),
                 parameter.nbytes(), CopyKind::device_to_host, copy_stream_);
  }
  device_.synchronize(copy_stream_);
  for (std::int64_t group = 0; group < tier_->group_count(); ++group) {
    const StateGroup state = tier_->acquire(group);
    convert_to_f32(staging + state.begin * static_cast<std::int64_t>(dtype_size(parameter_dtype_)), state.master, parameter_dtype_,
                   static_cast<std::size_t>(state.count));
    tier_->release(group, true);
  }
  tier_->flush();
}

ZeroOffloadOptimizer::~ZeroOffloadOptimizer() = default;

void ZeroOffloadOptimizer::begin_step() { gradients_->zero(); }

GradientCheck ZeroOffloadOptimizer::check_gradients(std::optional<std::size_t> excluded) const {
  GradientCheck total;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (excluded == i) continue;
    const GradientCheck each = adam_->check_gradients(gradients_->of(i), 1.0f);
    total.sum_of_squares += each.sum_of_squares;
    total.finite = total.finite && each.finite;
  }
  return total;
}

template <typename Visit>
void ZeroOffloadOptimizer::for_each_segment(const StateGroup& state, Visit visit) const {
  const std::int64_t end = state.begin + state.count;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const std::int64_t first = std::max(state.begin, gradients_->offset_of(i));
    const std::int64_t last = std::min(end, gradients_->offset_of(i + 1));
    if (first < last) visit(i, first, last);
  }
}

std::vector<AdamWSpan> ZeroOffloadOptimizer::spans_of(const StateGroup& state) const {
  std::vector<AdamWSpan> spans;
  const auto element = static_cast<std::int64_t>(dtype_size(parameter_dtype_));
  for_each_segment(state, [&](std::size_t i, std::int64_t first, std::int64_t last) {
    const std::int64_t in_group = first - state.begin;
    AdamWSpan span;
    span.master = state.master + in_group;
    span.first_moment = state.first_moment + in_group;
    span.second_moment = state.second_moment + in_group;
    span.gradient = gradients_->all().data() + first;
    span.parameter_out = staged(state, element) + (first - state.begin) * element;
    span.parameter_dtype = parameter_dtype_;
    span.count = last - first;
    span.decay = parameters_[i].decay;
    spans.push_back(span);
  });
  return spans;
}

void ZeroOffloadOptimizer::copy_after_compute() {
  const Event computed = device_.record_event(device_.default_stream());
  device_.wait_event(copy_stream_, computed);
  device_.release_event(computed);
}

std::byte* ZeroOffloadOptimizer::staged(const StateGroup& state, std::int64_t element) const {
  return static_cast<std::byte*>(staging_.data()) + (home_ != nullptr ? 0 : state.begin * element);
}

void ZeroOffloadOptimizer::return_parameters(const StateGroup& state) {
  const auto element = static_cast<std::int64_t>(dtype_size(parameter_dtype_));
  if (home_ != nullptr) {
    home_->store({state.begin, state.count}, staged(state, element));
    return;
  }
  const auto* staging = static_cast<const std::byte*>(staging_.data());
  for_each_segment(state, [&](std::size_t i, std::int64_t first, std::int64_t last) {
    auto* destination = static_cast<std::byte*>(parameters_[i].parameter->data()) + (first - gradients_->offset_of(i)) * element;
    device_.copy(destination, staging + first * element, static_cast<std::size_t>((last - first) * element), CopyKind::host_to_device,
                 copy_stream_);
  });
}

std::int64_t ZeroOffloadOptimizer::step(float learning_rate, float gradient_scale) {
  // A step that fails part-way (an NVMe error after some sub-groups) leaves the device parameters and
  // the step count as they were: the updated parameters wait in staging until every sub-group is
  // written back. The NVMe state of the groups already written is then newer than the rest, so the
  // store refuses further work and the run resumes from its last checkpoint.
  const std::int64_t step_number = steps_ + 1;
  const OpScope op(device_, "optimizer", "zero_offload_adamw");
  const Clock::time_point start = Clock::now();
  times_ = {};
  AdamWSettings settings = settings_;
  settings.learning_rate = learning_rate;
  const std::int64_t groups = tier_->group_count();
  copy_after_compute();
  tier_->prefetch(0);
  for (std::int64_t group = 0; group < groups; ++group) {
    if (group + 1 < groups) tier_->prefetch(group + 1);  // read ahead while this group updates
    Clock::time_point mark = Clock::now();
    const StateGroup state = tier_->acquire(group);
    times_.read_wait += seconds_since(mark);
    mark = Clock::now();
    adam_->step(spans_of(state), settings, step_number, gradient_scale);
    times_.adam += seconds_since(mark);
    // A home's staging is one sub-group: stored before the next group's update overwrites it (a step
    // that fails part-way then leaves the home partly updated, as the NVMe state is).
    if (home_ != nullptr) return_parameters(state);
    tier_->release(group, true);  // written back while the next group updates
  }
  Clock::time_point mark = Clock::now();
  tier_->flush();
  times_.write_wait += seconds_since(mark);
  mark = Clock::now();
  if (home_ != nullptr) {
    home_->flush();
  } else {
    for (std::int64_t group = 0; group < groups; ++group) return_parameters(tier_->bounds_of(group));
  }
  device_.synchronize(copy_stream_);
  times_.copy_back = seconds_since(mark);
  steps_ = step_number;
  times_.step = seconds_since(start);
  return steps_;
}

void ZeroOffloadOptimizer::export_state(std::vector<float>& master, std::vector<float>& first_moment, std::vector<float>& second_moment) {
  const auto total = static_cast<std::size_t>(total_elements());
  master.resize(total);
  first_moment.resize(total);
  second_moment.resize(total);
  export_by_group([&](std::int64_t begin, std::int64_t count, const float* from_master, const float* from_first, const float* from_second) {
    std::copy_n(from_master, count, master.begin() + begin);
    std::copy_n(from_first, count, first_moment.begin() + begin);
    std::copy_n(from_second, count, second_moment.begin() + begin);
  });
}

void ZeroOffloadOptimizer::export_by_group(const GroupRead& read) {
  for (std::int64_t group = 0; group < tier_->group_count(); ++group) {
    const StateGroup state = tier_->acquire(group);
    try {
      read(state.begin, state.count, state.master, state.first_moment, state.second_moment);
    } catch (...) {
      tier_->release(group, false);
      throw;
    }
    tier_->release(group, false);
  }
}

void ZeroOffloadOptimizer::import_state(const std::vector<float>& master, const std::vector<float>& first_moment,
                                        const std::vector<float>& second_moment) {
  const auto total = static_cast<std::size_t>(total_elements());
  if (master.size() != total || first_moment.size() != total || second_moment.size() != total) {
    throw std::invalid_argument("optimizer state of " + std::to_string(master.size()) + " elements for " + std::to_string(total) + " parameters");
  }
  import_by_group([&](std::int64_t begin, std::int64_t count, float* to_master, float* to_first, float* to_second) {
    std::copy_n(master.begin() + begin, count, to_master);
    std::copy_n(first_moment.begin() + begin, count, to_first);
    std::copy_n(second_moment.begin() + begin, count, to_second);
  });
}

void ZeroOffloadOptimizer::import_by_group(const GroupFill& fill) {
  const auto element = static_cast<std::int64_t>(dtype_size(parameter_dtype_));
  copy_after_compute();
  for (std::int64_t group = 0; group < tier_->group_count(); ++group) {
    const StateGroup state = tier_->acquire(group);
    try {
      fill(state.begin, state.count, state.master, state.first_moment, state.second_moment);
    } catch (...) {
      tier_->release(group, false);
      throw;
    }
    convert_from_f32(state.master, staged(state, element), parameter_dtype_,
                     static_cast<std::size_t>(state.count));
    tier_->release(group, true);
    return_parameters(state);
  }
  tier_->flush();
  if (home_ != nullptr) home_->flush();
  device_.synchronize(copy_stream_);
}

void ZeroOffloadOptimizer::set_nvme_fault_injector(FaultInjector injector) {
  if (!store_) throw std::logic_error("the cpu tier has no NVMe store to inject faults into");
  store_->set_fault_injector(std::move(injector));
}

std::int64_t ZeroOffloadOptimizer::host_pinned_peak() const {
  return pinned_ ? pinned_->statistics().allocated_bytes.peak : 0;
}

}  // namespace ferry::offload
