#include "schedule/pipeline_partition.h"

#include <algorithm>
#include <cmath>
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

// prefix[i]: the cost of blocks [0, i).
std::vector<double> prefix_sums(const std::vector<double>& block_costs) {
  std::vector<double> prefix(block_costs.size() + 1, 0.0);
  for (std::size_t layer = 0; layer < block_costs.size(); ++layer) prefix[layer + 1] = prefix[layer] + block_costs[layer];
  return prefix;
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
  const std::vector<double> prefix = prefix_sums(block_costs);
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

namespace {

// The splits whose every stage costs at most `bound` and whose most expensive one costs more than
// `floor` (those cost at most `floor` were found under an earlier bound), in order of their cuts.
class BoundedSplits {
 public:
  BoundedSplits(const std::vector<double>& prefix, std::int32_t stages, double embedding_cost, double head_cost, double floor, double bound,
                std::size_t wanted)
      : prefix_(prefix), layers_(static_cast<std::int64_t>(prefix.size()) - 1), stages_(stages), embedding_cost_(embedding_cost),
        head_cost_(head_cost), floor_(floor), bound_(bound), wanted_(wanted) {}

  void visit(std::int32_t stage, std::int64_t first, double worst) {
    if (found.size() >= wanted_) return;
    const std::int32_t after = stages_ - 1 - stage;  // stages left after this one
    for (std::int64_t end = stage == stages_ - 1 ? layers_ : first + 1; end <= layers_ - after; ++end) {
      const double cost = stage_cost(prefix_, first, end, stage, stages_, embedding_cost_, head_cost_);
      if (cost > bound_) {  // more blocks only cost more
        cut_off(cost);
        return;
      }
      if (after > 0) {
        // The blocks left must fit the stages left under the bound: on average, at least.
        const double rest = stage_cost(prefix_, end, layers_, stages_ - 1, stages_, 0.0, head_cost_) / after;
        if (rest > bound_) {
          cut_off(rest);
          continue;
        }
      }
      current_.push_back({first, end, cost});
      if (after > 0) {
        visit(stage + 1, end, std::max(worst, cost));
      } else if (std::max(worst, cost) > floor_) {
        found.push_back(current_);
      }
      current_.pop_back();
    }
  }

  std::vector<std::vector<StageBlocks>> found;
  // The least any split left out can cost: the next bound (infinity when none was left out).
  double next_bound = std::numeric_limits<double>::infinity();

 private:
  void cut_off(double least) { next_bound = std::min(next_bound, least); }

  const std::vector<double>& prefix_;
  std::int64_t layers_;
  std::int32_t stages_;
  double embedding_cost_, head_cost_, floor_, bound_;
  std::size_t wanted_;
  std::vector<StageBlocks> current_;
};

bool same_split(const std::vector<StageBlocks>& a, const std::vector<StageBlocks>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const StageBlocks& x, const StageBlocks& y) { return x.first == y.first && x.end == y.end; });
}

double most_expensive(const std::vector<StageBlocks>& split) {
  double most = 0;
  for (const StageBlocks& stage : split) most = std::max(most, stage.cost);
  return most;
}

}  // namespace

std::vector<std::vector<StageBlocks>> pipeline_partitions_by_cost(const std::vector<double>& block_costs, double embedding_cost,
                                                                  double head_cost, std::int32_t stages, std::size_t count) {
  std::vector<std::vector<StageBlocks>> result{partition_pipeline_stages(block_costs, embedding_cost, head_cost, stages)};
  const std::vector<double> prefix = prefix_sums(block_costs);
  double floor = -std::numeric_limits<double>::infinity();
  double bound = most_expensive(result.front());
  while (result.size() < count && std::isfinite(bound)) {
    // One more split than wanted: the balanced one comes up again and is skipped.
    BoundedSplits splits(prefix, stages, embedding_cost, head_cost, floor, bound, count - result.size() + 1);
    splits.visit(0, 0, -std::numeric_limits<double>::infinity());
    for (std::vector<StageBlocks>& split : splits.found) {
      if (result.size() < count && !same_split(split, result.front())) result.push_back(std::move(split));
    }
    floor = bound;
    bound = splits.next_bound;
  }
  return result;
}

}  // namespace ferry
