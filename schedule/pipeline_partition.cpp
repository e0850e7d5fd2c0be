#include "schedule/pipeline_partition.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace ferry {
namespace {

// The cost of blocks [first, end) as stage `stage` of `stages`.
double stage_cost(const std::vector<double>& prefix, std::int64_t first, std::int64_t end, std::int32_t stage, std::int32_t stages,
                  double embedding_cost, double head_cost) {
  double cost = prefix[static_cast<std::size_t>(end)] - prefix[static_cast<std::size_t>(first)];
  if (stage == 0) cost += embedding_cost;
  if (stage == stages - 1) cost += head_cost;
  return cost;
}

}  // namespace

std::vector<StageBlocks> partition_pipeline_stages(const std::vector<double>& block_costs, double embedding_cost, double head_cost,
                                                   std::int32_t stages) {
  const auto layers = static_cast<std::int64_t>(block_costs.size());
  if (stages < 1) throw std::invalid_argument("a pipeline needs at least 1 stage, got " + std::to_string(stages));
  if (layers < stages) {
    throw std::invalid_argument("the model has " + std::to_string(layers) + " blocks, fewer than the " + std::to_string(stages) +
                                " pipeline stages (each stage needs a block): lower --pp (or the interleaved chunks) or use more --layers");
  }
  std::vector<double> prefix(static_cast<std::size_t>(layers) + 1, 0.0);
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    prefix[static_cast<std::size_t>(layer) + 1] = prefix[static_cast<std::size_t>(layer)] + block_costs[static_cast<std::size_t>(layer)];
  }
  // best[s][e]: the smallest maximum cost of stages 0..s covering blocks [0, e); cut[s][e] the first
  // block of stage s in it. Dynamic programming, O(stages * layers^2): layers are few.
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  const auto columns = static_cast<std::size_t>(layers) + 1;
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages), std::vector<double>(columns, kInfinity));
  std::vector<std::vector<std::int64_t>> cut(static_cast<std::size_t>(stages), std::vector<std::int64_t>(columns, 0));
  for (std::int64_t end = 1; end <= layers; ++end) {
    best[0][static_cast<std::size_t>(end)] = stage_cost(prefix, 0, end, 0, stages, embedding_cost, head_cost);
  }
  for (std::int32_t stage = 1; stage < stages; ++stage) {
    for (std::int64_t end = stage + 1; end <= layers; ++end) {
      for (std::int64_t first = stage; first < end; ++first) {
        const double cost = std::max(best[static_cast<std::size_t>(stage) - 1][static_cast<std::size_t>(first)],
                                     stage_cost(prefix, first, end, stage, stages, embedding_cost, head_cost));
        // Strictly better only: ties keep the earliest cut, so earlier stages take fewer blocks first.
        if (cost < best[static_cast<std::size_t>(stage)][static_cast<std::size_t>(end)]) {
          best[static_cast<std::size_t>(stage)][static_cast<std::size_t>(end)] = cost;
          cut[static_cast<std::size_t>(stage)][static_cast<std::size_t>(end)] = first;
        }
      }
    }
  }
  std::vector<StageBlocks> result(static_cast<std::size_t>(stages));
  std::int64_t end = layers;
  for (std::int32_t stage = stages - 1; stage >= 0; --stage) {
    const std::int64_t first = stage == 0 ? 0 : cut[static_cast<std::size_t>(stage)][static_cast<std::size_t>(end)];
    result[static_cast<std::size_t>(stage)] = {first, end, stage_cost(prefix, first, end, stage, stages, embedding_cost, head_cost)};
    end = first;
  }
  return result;
}

}  // namespace ferry
