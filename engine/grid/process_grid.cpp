#include "engine/grid/process_grid.h"

#include <stdexcept>

#include "engine/comm/nccl_communicator.h"

namespace ferry {

std::string GridShape::text() const {
  return "tp " + std::to_string(tp) + " x dp " + std::to_string(dp) + " x pp " + std::to_string(pp);
}

void validate_grid_shape(const GridShape& shape) {
  for (const auto& [name, size] : {std::pair{"--tp", shape.tp}, std::pair{"--dp", shape.dp}, std::pair{"--pp", shape.pp}}) {
    if (size < 1) throw std::invalid_argument(std::string(name) + " must be at least 1, got " + std::to_string(size));
  }
}

GridCoordinates grid_coordinates(const GridShape& shape, int rank) {
  if (rank < 0 || rank >= shape.world()) {
    throw std::out_of_range("rank " + std::to_string(rank) + " is outside the grid " + shape.text());
  }
  return {rank % shape.tp, rank / shape.tp % shape.dp, rank / (shape.tp * shape.dp)};
}

int grid_rank(const GridShape& shape, const GridCoordinates& c) { return c.tp + shape.tp * (c.dp + shape.dp * c.pp); }

std::vector<int> grid_group(const GridShape& shape, int rank, GridAxis axis) {
  const GridCoordinates origin = grid_coordinates(shape, rank);
  const int size = axis == GridAxis::tp ? shape.tp : axis == GridAxis::dp ? shape.dp : shape.pp;
  std::vector<int> ranks;
  for (int index = 0; index < size; ++index) {
    GridCoordinates member = origin;
    (axis == GridAxis::tp ? member.tp : axis == GridAxis::dp ? member.dp : member.pp) = index;
    ranks.push_back(grid_rank(shape, member));
  }
  return ranks;
}

namespace {

int axis_index(const GridCoordinates& c, GridAxis axis) { return axis == GridAxis::tp ? c.tp : axis == GridAxis::dp ? c.dp : c.pp; }

}  // namespace

ProcessGrid::ProcessGrid(const GridShape& shape, int rank) : shape_(shape), rank_(rank) {
  validate_grid_shape(shape);
  coordinates_ = grid_coordinates(shape, rank);
}

ProcessGrid ProcessGrid::split(Communicator& world, const GridShape& shape) {
  validate_grid_shape(shape);
  if (world.size() != shape.world()) {
    throw std::invalid_argument("the job has " + std::to_string(world.size()) + " ranks but the grid " + shape.text() + " needs " +
                                std::to_string(shape.world()) + "; launch that many ranks or change --tp, --pp or --dp");
  }
  ProcessGrid grid(shape, world.rank());
  // Every rank splits along every axis in the same order (the split is a collective). The color is the
  // group's lowest world rank; the key the rank's place in the group.
  for (const GridAxis axis : {GridAxis::tp, GridAxis::dp, GridAxis::pp}) {
    const std::vector<int> members = grid_group(shape, world.rank(), axis);
    std::unique_ptr<Communicator> group = world.split(members.front(), axis_index(grid.coordinates_, axis));
    (axis == GridAxis::tp ? grid.tp_ : axis == GridAxis::dp ? grid.dp_ : grid.pp_) = std::move(group);
  }
  grid.world_ = world.split(0, world.rank());  // the grid's own copy of the world (checkpoints' collectives)
  return grid;
}

ProcessGrid ProcessGrid::dry_run(const GridShape& shape, int rank) {
  ProcessGrid grid(shape, rank);
  grid.tp_ = make_dry_run_communicator(grid.coordinates_.tp, shape.tp);
  grid.dp_ = make_dry_run_communicator(grid.coordinates_.dp, shape.dp);
  grid.pp_ = make_dry_run_communicator(grid.coordinates_.pp, shape.pp);
  grid.world_ = make_dry_run_communicator(rank, shape.world());
  return grid;
}

Communicator& ProcessGrid::group(GridAxis axis) const {
  const std::unique_ptr<Communicator>& group = axis == GridAxis::tp ? tp_ : axis == GridAxis::dp ? dp_ : pp_;
  return *group;
}

nlohmann::json ProcessGrid::describe() const {
  return {{"rank", rank_},
          {"tp", coordinates_.tp},
          {"dp", coordinates_.dp},
          {"pp", coordinates_.pp},
          {"groups",
           {{"tp", grid_group(shape_, rank_, GridAxis::tp)},
            {"dp", grid_group(shape_, rank_, GridAxis::dp)},
            {"pp", grid_group(shape_, rank_, GridAxis::pp)}}}};
}

std::optional<int> ProcessGrid::gpu() const {
  if (const auto* nccl = dynamic_cast<const NcclCommunicator*>(world_.get())) return nccl->device();
  return std::nullopt;
}

ProcessGrid::NcclGroups ProcessGrid::nccl_groups() const {
  NcclGroups groups{};
  Communicator* const all[] = {tp_.get(), dp_.get(), pp_.get(), world_.get()};
  for (std::size_t index = 0; index < groups.size(); ++index) groups[index] = dynamic_cast<NcclCommunicator*>(all[index]);
  return groups;
}

ProcessGrid::CommunicationRecording ProcessGrid::record_communication(Device& device) const {
  // One track per group, after the device's own streams: tp, dp, pp, world.
  const NcclGroups groups = nccl_groups();
  for (std::size_t index = 0; index < groups.size(); ++index) {
    if (groups[index] != nullptr) groups[index]->record_operations(&device.op_recorder(), kCommunicationStreams + index);
  }
  return CommunicationRecording(groups);
}

ProcessGrid::CommunicationRecording::~CommunicationRecording() {
  for (NcclCommunicator* group : groups_) {
    if (group != nullptr) group->record_operations(nullptr, 0);
  }
}

void ProcessGrid::order_after_compute(const Device& device) const {
  auto* compute = static_cast<CUstream_st*>(device.native_stream_handle(device.default_stream()));
  for (NcclCommunicator* group : nccl_groups()) {
    if (group != nullptr) group->order_after(compute);
  }
}

}  // namespace ferry
