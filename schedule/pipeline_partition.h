// Splits a model's blocks into contiguous pipeline stages balanced by cost: the embedding's cost goes
// to the first stage and the LM head's (with the loss) to the last, and the most expensive stage is as
// cheap as it can be (the pipeline's pace is its slowest stage). Also lists the other splits, cheapest
// first, for a choice that weighs memory too.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry {

struct StageBlocks {
  std::int64_t first = 0;  // blocks [first, end)
  std::int64_t end = 0;
  double cost = 0;         // the blocks' cost, plus the embedding or head on the ends
};

// `block_costs[layer]` for each block; every stage gets at least one block. Among the partitions with the
// smallest maximum stage cost, the one whose stages start earliest, last stage first (deterministic).
// Throws std::invalid_argument when there are fewer blocks than stages (naming the fix).
std::vector<StageBlocks> partition_pipeline_stages(const std::vector<double>& block_costs, double embedding_cost,
                                                   double head_cost, std::int32_t stages);

// Contiguous splits (every stage at least one block), cheapest first by their most expensive stage:
// partition_pipeline_stages's first, then the others in order of cost (equal costs in order of their
// cuts), at most `count` of them. Found by depth-first search under a rising cost bound, so that only
// the splits near the cheapest are visited, however many blocks and stages there are.
std::vector<std::vector<StageBlocks>> pipeline_partitions_by_cost(const std::vector<double>& block_costs, double embedding_cost,
                                                                  double head_cost, std::int32_t stages, std::size_t count);

}  // namespace ferry
