#include "engine/train/stage_snapshots.h"

#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace ferry {
namespace {

// Each stage's three arrays travel under these tags (the pipeline's step messages are all received).
constexpr int kMasterTag = 1, kFirstMomentTag = 2, kSecondMomentTag = 3;

nlohmann::json layout_of(const OptimizerSnapshot& snapshot) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const Shape& shape : snapshot.shapes) shapes.push_back(shape);
  return {{"names", snapshot.names}, {"shapes", shapes}, {"offsets", snapshot.offsets}, {"steps", snapshot.steps},
          {"elements", snapshot.master.size()}};
}

// Appends parameter i of `stage` to `whole` unless a parameter of that name is there already.
void append_parameter(OptimizerSnapshot& whole, std::set<std::string>& names, const OptimizerSnapshot& stage, std::size_t i) {
  if (!names.insert(stage.names[i]).second) return;  // the tied table, already taken from the first stage
  const auto begin = static_cast<std::size_t>(stage.offsets[i]);
  const std::size_t end = i + 1 < stage.offsets.size() ? static_cast<std::size_t>(stage.offsets[i + 1]) : stage.master.size();
  whole.names.push_back(stage.names[i]);
  whole.shapes.push_back(stage.shapes[i]);
  whole.offsets.push_back(static_cast<std::int64_t>(whole.master.size()));
  whole.master.insert(whole.master.end(), stage.master.begin() + begin, stage.master.begin() + end);
  whole.first_moment.insert(whole.first_moment.end(), stage.first_moment.begin() + begin, stage.first_moment.begin() + end);
  whole.second_moment.insert(whole.second_moment.end(), stage.second_moment.begin() + begin, stage.second_moment.begin() + end);
}

}  // namespace

OptimizerSnapshot gather_stage_snapshots(Communicator& pipeline, OptimizerSnapshot local) {
  const std::vector<std::string> layouts = pipeline.gather_strings(layout_of(local).dump(), 0);
  if (pipeline.rank() != 0) {
    for (const auto& [tag, values] : {std::pair{kMasterTag, &local.master}, std::pair{kFirstMomentTag, &local.first_moment},
                                      std::pair{kSecondMomentTag, &local.second_moment}}) {
      pipeline.send(values->data(), values->size() * sizeof(float), 0, tag);
    }
    return {};
  }
  OptimizerSnapshot whole;
  whole.steps = local.steps;
  std::set<std::string> names;
  for (int rank = 0; rank < pipeline.size(); ++rank) {
    OptimizerSnapshot stage;
    if (rank == 0) {
      stage = std::move(local);
    } else {
      const nlohmann::json layout = nlohmann::json::parse(layouts.at(static_cast<std::size_t>(rank)));
      stage.names = layout.at("names").get<std::vector<std::string>>();
      for (const nlohmann::json& shape : layout.at("shapes")) stage.shapes.push_back(shape.get<Shape>());
      stage.offsets = layout.at("offsets").get<std::vector<std::int64_t>>();
      stage.steps = layout.at("steps").get<std::int64_t>();
      const auto elements = layout.at("elements").get<std::size_t>();
      for (const auto& [tag, values] : {std::pair{kMasterTag, &stage.master}, std::pair{kFirstMomentTag, &stage.first_moment},
                                        std::pair{kSecondMomentTag, &stage.second_moment}}) {
        values->resize(elements);
        pipeline.receive(values->data(), elements * sizeof(float), rank, tag);
      }
      if (stage.steps != whole.steps) {
        throw std::logic_error("pipeline rank " + std::to_string(rank) + " has taken " + std::to_string(stage.steps) +
                               " optimizer steps, rank 0 " + std::to_string(whole.steps) + ": the stages' checkpoints would disagree");
      }
    }
    for (std::size_t i = 0; i < stage.names.size(); ++i) append_parameter(whole, names, stage, i);
  }
  return whole;
}

}  // namespace ferry
