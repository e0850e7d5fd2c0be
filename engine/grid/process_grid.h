// The process grid: a job's ranks as tp x dp x pp, ordered as Megatron orders them (tp fastest, then
// dp, then pp), and each rank's tensor-, data- and pipeline-parallel groups as communicators of their
// own (split from the world, or dry-run communicators that move nothing for one-process dry runs).
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/device.h"

namespace ferry {

class NcclCommunicator;

struct GridShape {
  int tp = 1;
  int dp = 1;
  int pp = 1;
  int world() const { return tp * dp * pp; }
  std::string text() const;  // "tp 2 x dp 4 x pp 1"
};

struct GridCoordinates {
  int tp = 0;
  int dp = 0;
  int pp = 0;
};

enum class GridAxis { tp, dp, pp };

// Checks every size >= 1; throws std::invalid_argument naming the size.
void validate_grid_shape(const GridShape& shape);
GridCoordinates grid_coordinates(const GridShape& shape, int rank);
int grid_rank(const GridShape& shape, const GridCoordinates& coordinates);
// The world ranks of `rank`'s group along `axis`, in the group's rank order.
std::vector<int> grid_group(const GridShape& shape, int rank, GridAxis axis);

class ProcessGrid {
 public:
  // Splits `world` (of shape.world() ranks) into this rank's groups; every rank calls it together.
  static ProcessGrid split(Communicator& world, const GridShape& shape);
  // Rank `rank` of a grid simulated in one process: groups of the right sizes that move nothing.
  static ProcessGrid dry_run(const GridShape& shape, int rank);

  const GridShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  const GridCoordinates& coordinates() const { return coordinates_; }
  Communicator& group(GridAxis axis) const;
  Communicator& dp() const { return group(GridAxis::dp); }
  Communicator& tp() const { return group(GridAxis::tp); }
  Communicator& pp() const { return group(GridAxis::pp); }
  // Every rank of the grid, in world order.
  Communicator& world() const { return *world_; }
  // The GPU of a grid split from an NCCL communicator (a cuda job's), whose device must be that one.
  std::optional<int> gpu() const;
  // A cuda job's grid: every group's later collectives wait, on the GPU, for the work queued on the
  // device's compute stream (the kernels that wrote what they read). Nothing for other grids.
  void order_after_compute(const Device& device) const;
  // A cuda job's grid: while the returned object lives (make it after `device`, so it goes first), each
  // group's completed operations become ops on `device`'s recorder (profiles), on a stream id of their
  // own from kCommunicationStreams (tp, dp, pp, world). Nothing for other grids.
  // The groups that are NCCL communicators (a cuda job's), null for the others: tp, dp, pp, world.
  using NcclGroups = std::array<NcclCommunicator*, 4>;
  class CommunicationRecording {
   public:
    explicit CommunicationRecording(NcclGroups groups) : groups_(groups) {}
    ~CommunicationRecording();
    CommunicationRecording(const CommunicationRecording&) = delete;
    CommunicationRecording& operator=(const CommunicationRecording&) = delete;

   private:
    NcclGroups groups_;
  };
  [[nodiscard]] CommunicationRecording record_communication(Device& device) const;
  static constexpr StreamId kCommunicationStreams = 100;
  // {rank, tp, dp, pp, groups: {tp: [...], dp: [...], pp: [...]}}
  nlohmann::json describe() const;

 private:
  ProcessGrid(const GridShape& shape, int rank);
  NcclGroups nccl_groups() const;
  GridShape shape_;
  int rank_ = 0;
  GridCoordinates coordinates_;
  std::unique_ptr<Communicator> tp_, dp_, pp_, world_;
};

}  // namespace ferry
