#include "engine/plan/cluster.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "engine/core/cpu_device.h"

namespace ferry {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

// A GPU preset: the memory CUDA reports as total, dense bf16 FLOP/s from the data sheet, and bus
// bandwidths as nccl-tests measures them on such systems (nominal: not measured here).
struct GpuPreset {
  const char* name;
  std::size_t memory;
  double flops;
  double hbm;
  double nvlink;
  double network;
  double pcie;
  std::size_t host_memory;
  double host_bandwidth;
  std::size_t nvme;        // a DGX-class node's data drives
  double nvme_bandwidth;
};

constexpr GpuPreset kGpuPresets[] = {
    {"H100-80GB", 81559 * kMiB, 989e12, 3.35e12, 450e9, 45e9, 50e9, 2048 * kGiB, 75e9, 8 * 3576 * kGiB, 25e9},
    {"H200-141GB", 143771 * kMiB, 989e12, 4.8e12, 450e9, 45e9, 50e9, 2048 * kGiB, 75e9, 8 * 3576 * kGiB, 25e9},
    {"A100-80GB", 81251 * kMiB, 312e12, 2.0e12, 230e9, 23e9, 25e9, 1024 * kGiB, 50e9, 4 * 3576 * kGiB, 12e9},
    {"A100-40GB", 40536 * kMiB, 312e12, 1.55e12, 230e9, 23e9, 25e9, 1024 * kGiB, 50e9, 4 * 3576 * kGiB, 12e9},
};

// The share of peak a training step's kernels sustain: GPUs, a typical 16-bit transformer step (not yet
// measured on ferry: issue 32); cpu, ferry's step beside its own GEMM rate (a 4-block GPT of width 256
// on 2 ranks, benchmarks/plan_accuracy.py: about half, the rest its attention, norms and copies).
constexpr double kGpuEfficiency = 0.45;
constexpr double kCpuEfficiency = 0.5;

ClusterSpec cpu_cluster(int nodes, int ranks, double machine_flops) {
  ClusterSpec spec;
  spec.device_name = "cpu";
  spec.nodes = nodes;
  spec.devices_per_node = ranks;
  spec.kind = DeviceKind::cpu;
  spec.host_memory = physical_memory_bytes();
  spec.device_memory = spec.host_memory / static_cast<std::size_t>(std::max(ranks, 1));
  spec.peak_flops = machine_flops / std::max(ranks, 1);  // the ranks share the machine's cores
  spec.compute_efficiency = kCpuEfficiency;
  // Ranks on one machine talk through shared memory; the cpu device's "host link" is a memcpy.
  spec.intra_node_bandwidth = 5e9;
  spec.inter_node_bandwidth = 1e9;
  spec.device_memory_bandwidth = 5e9;
  spec.host_link_bandwidth = 5e9;
  spec.host_memory_bandwidth = 5e9;
  spec.nvme_memory = 0;  // none unless the plan is given a directory (--nvme-path) or a size (--nvme)
  spec.nvme_bandwidth = 1e9;
  spec.call_seconds = 2e-5;
  spec.collective_seconds = 5e-5;
  spec.source = "this machine: the cpu device's GEMM rate measured now, shared by the ranks; links nominal";
  return spec;
}

}  // namespace

double ClusterSpec::group_bandwidth(int size, int stride) const {
  if (size <= 1) return intra_node_bandwidth;
  const long span = static_cast<long>(size - 1) * stride + 1;
  return span <= devices_per_node ? intra_node_bandwidth : inter_node_bandwidth;
}

std::vector<std::string> cluster_device_names() {
  std::vector<std::string> names;
  for (const GpuPreset& preset : kGpuPresets) names.emplace_back(preset.name);
  names.emplace_back("cpu");
  return names;
}

ClusterSpec parse_cluster(const std::string& text, int local_ranks, double measured_cpu_flops) {
  if (text == "local") {
    ClusterSpec spec = cpu_cluster(1, local_ranks, measured_cpu_flops);
    spec.name = text;
    return spec;
  }
  std::string names;
  for (const std::string& name : cluster_device_names()) names += (names.empty() ? "" : ", ") + name;
  const std::string usage = "--cluster takes NODESxDEVICESxKIND (e.g. 8x8xH100-80GB, 1x4xcpu) or local; kinds: " + names;
  const std::size_t first = text.find('x'), second = first == std::string::npos ? first : text.find('x', first + 1);
  if (second == std::string::npos) throw std::invalid_argument("--cluster '" + text + "': " + usage);
  auto count = [&](const std::string& part) {
    char* end = nullptr;
    const long value = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || value < 1 || value > 1'000'000) throw std::invalid_argument("--cluster '" + text + "': '" + part + "' is not a positive count; " + usage);
    return static_cast<int>(value);
  };
  const int nodes = count(text.substr(0, first)), devices = count(text.substr(first + 1, second - first - 1));
  const std::string kind = text.substr(second + 1);
  ClusterSpec spec;
  if (kind == "cpu") {
    spec = cpu_cluster(nodes, devices, measured_cpu_flops);
  } else {
    const GpuPreset* preset = nullptr;
    for (const GpuPreset& each : kGpuPresets) {
      if (kind == each.name) preset = &each;
    }
    if (preset == nullptr) throw std::invalid_argument("--cluster '" + text + "': no device kind '" + kind + "'; " + usage);
    spec.device_name = preset->name;
    spec.nodes = nodes;
    spec.devices_per_node = devices;
    spec.kind = DeviceKind::cuda;
    spec.device_memory = preset->memory;
    spec.host_memory = preset->host_memory;
    spec.peak_flops = preset->flops;
    spec.compute_efficiency = kGpuEfficiency;
    spec.intra_node_bandwidth = preset->nvlink;
    spec.inter_node_bandwidth = preset->network;
    spec.device_memory_bandwidth = preset->hbm;
    spec.host_link_bandwidth = preset->pcie;
    spec.host_memory_bandwidth = preset->host_bandwidth;
    spec.nvme_memory = preset->nvme;
    spec.nvme_bandwidth = preset->nvme_bandwidth;
    spec.call_seconds = 5e-6;        // a kernel launch
    spec.collective_seconds = 2e-5;  // an NCCL call's latency inside a node
    spec.source = std::string(preset->name) + " preset: data-sheet dense bf16 FLOP/s, nccl-tests-class bus bandwidths, " +
                  "an assumed 45% of peak sustained (not yet measured on this GPU), a DGX-class node's NVMe drives";
  }
  spec.name = text;
  return spec;
}

ClusterSpec cluster_of_run(DeviceKind kind, int ranks, std::size_t device_memory, double measured_cpu_flops) {
  const int gpus_per_node = 8;
  const int nodes = kind == DeviceKind::cuda ? (ranks + gpus_per_node - 1) / gpus_per_node : 1;
  const int per_node = kind == DeviceKind::cuda ? std::min(ranks, gpus_per_node) : ranks;
  ClusterSpec spec = parse_cluster(std::to_string(nodes) + "x" + std::to_string(std::max(per_node, 1)) + (kind == DeviceKind::cuda ? "xH100-80GB" : "xcpu"), 1,
                                   measured_cpu_flops);
  spec.device_memory = device_memory;
  return spec;
}

}  // namespace ferry
