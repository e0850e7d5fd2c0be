// ClusterSpec: the machines a plan is for, as the planner's cost model and dry runs need them: nodes x
// devices per node of one kind, each device's memory, dense FLOP/s and links. Presets name real parts
// ("8x8xH100-80GB"); every figure can be overridden; `local` is this machine's cpu ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace ferry {

struct ClusterSpec {
  std::string name;                  // as given: "8x8xH100-80GB", "1x4xcpu", "local"
  std::string device_name;           // "H100-80GB", "cpu"
  int nodes = 1;
  int devices_per_node = 1;
  DeviceKind kind = DeviceKind::cpu;  // cuda for GPU presets: dry runs use cuda kernels' sizes
  std::size_t device_memory = 0;     // bytes per device
  std::size_t host_memory = 0;       // bytes per node
  double peak_flops = 0;             // dense FLOP/s per device (bf16 on GPUs; the cpu device's f32 GEMM rate)
  double compute_efficiency = 0;     // the share of peak_flops a training step's kernels sustain
  double intra_node_bandwidth = 0;   // bytes/s per device, collective bus bandwidth inside a node (nccl-tests' busbw)
  double inter_node_bandwidth = 0;   // bytes/s per device across nodes
  double device_memory_bandwidth = 0;  // bytes/s of a device's own memory (the optimizer step's rate)
  double host_link_bandwidth = 0;    // bytes/s between a device and pinned host memory
  double host_memory_bandwidth = 0;  // bytes/s of host memory per device (CpuAdam's rate)
  std::size_t nvme_memory = 0;       // bytes of NVMe per node for offloaded state (0: none)
  double nvme_bandwidth = 0;         // bytes/s of a node's NVMe, read or write, shared by its devices
  double call_seconds = 0;           // fixed cost of one op call (a kernel launch; a cpu op's fork and join)
  double collective_seconds = 0;     // fixed cost of one collective or host copy call, whatever its size
  std::string source;                // where the figures come from, said with the plans

  int world() const { return nodes * devices_per_node; }
  // The bandwidth of a group of `size` ranks spaced `stride` apart (a dp group: stride 1; pp neighbours:
  // stride dp): inside one node when the group's span fits a node.
  double group_bandwidth(int size, int stride) const;
};

// The presets' device names (H100-80GB, H200-141GB, A100-80GB, A100-40GB, cpu).
std::vector<std::string> cluster_device_names();

// "NODESxGPUSxDEVICE" (a preset's name) or "local" (this machine: one node, `local_ranks` cpu ranks,
// its memory, the cpu device's GEMM rate as `measured_cpu_flops`). Throws std::invalid_argument naming
// the text and the presets.
ClusterSpec parse_cluster(const std::string& text, int local_ranks, double measured_cpu_flops);

// The cluster a run of `ranks` ranks on devices of `kind` with `device_memory` each is on, for pricing
// its alternatives (out-of-memory advice): the cpu device's ranks on this machine (its GEMM rate as
// `measured_cpu_flops`), or GPUs as the H100-80GB preset's node(s) (nominal, said with the figures).
ClusterSpec cluster_of_run(DeviceKind kind, int ranks, std::size_t device_memory, double measured_cpu_flops);

}  // namespace ferry
