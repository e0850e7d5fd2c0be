// Which memory category a PyTorch allocation holds, inferred from the frames of its snapshot event by
// one stated rule (category_rule()), and the frame ferry writes so that its own categories and tags go
// through a snapshot and come back exactly.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "allocator/memory_category.h"
#include "engine/snapshot/torch_snapshot.h"

namespace ferry {

struct InferredCategory {
  MemoryCategory category = MemoryCategory::uncategorized;
  std::string tag;  // the innermost frame of user code ("train.py:42 forward"), or ferry's tag
  bool from_ferry = false;  // the category came from a frame ferry wrote
};

// The rule, in words, for reports.
std::string_view category_rule();
InferredCategory infer_category(const std::vector<TorchFrame>& frames);
// Only a frame ferry wrote (free events carry the frames of the free, which say nothing of what was freed).
InferredCategory ferry_category(const std::vector<TorchFrame>& frames);

// {filename "ferry/<category>", line 0, name <tag>}.
TorchFrame ferry_frame(MemoryCategory category, const std::string& tag);

}  // namespace ferry
