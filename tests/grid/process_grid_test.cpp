#include "engine/grid/process_grid.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

// Megatron's documented example: 16 ranks, tp 2, pp 4 (so dp 2).
TEST(ProcessGrid, GroupsFollowMegatronsOrder) {
  const GridShape shape{2, 2, 4};
  EXPECT_EQ(grid_group(shape, 0, GridAxis::tp), (std::vector<int>{0, 1}));
  EXPECT_EQ(grid_group(shape, 3, GridAxis::tp), (std::vector<int>{2, 3}));
  EXPECT_EQ(grid_group(shape, 0, GridAxis::dp), (std::vector<int>{0, 2}));
  EXPECT_EQ(grid_group(shape, 1, GridAxis::dp), (std::vector<int>{1, 3}));
  EXPECT_EQ(grid_group(shape, 0, GridAxis::pp), (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(grid_group(shape, 13, GridAxis::pp), (std::vector<int>{1, 5, 9, 13}));
  const GridCoordinates c = grid_coordinates(shape, 13);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.pp, 3);
  for (int rank = 0; rank < 16; ++rank) EXPECT_EQ(grid_rank(shape, grid_coordinates(shape, rank)), rank);
}

TEST(ProcessGrid, DryRunGroupsHaveTheGridsSizes) {
  const ProcessGrid grid = ProcessGrid::dry_run({1, 4, 2}, 5);
  EXPECT_EQ(grid.dp().size(), 4);
  EXPECT_EQ(grid.dp().rank(), 1);
  EXPECT_EQ(grid.pp().size(), 2);
  EXPECT_EQ(grid.pp().rank(), 1);
  EXPECT_EQ(grid.tp().size(), 1);
  EXPECT_EQ(grid.describe()["groups"]["dp"], (std::vector<int>{4, 5, 6, 7}));
}

TEST(ProcessGrid, BadShapesNameTheSetting) {
  EXPECT_THROW(validate_grid_shape({1, 0, 1}), std::invalid_argument);
  EXPECT_THROW(grid_coordinates({2, 2, 1}, 4), std::out_of_range);
  const std::unique_ptr<Communicator> world = make_single_rank_communicator();
  try {
    ProcessGrid::split(*world, {1, 2, 1});
    FAIL() << "a grid larger than the world was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("needs 2"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace ferry
