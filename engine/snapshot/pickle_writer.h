// Writes a PickleDocument as a protocol-4 pickle (no frames, no memo) that Python's pickle.load, and
// so PyTorch's memory_viz, reads back as plain dicts, lists, tuples, strings and numbers.
#pragma once

#include <string>

#include "engine/snapshot/pickle_document.h"

namespace ferry {

// The pickle of `document`'s root. Throws PickleError when the values nest deeper than `max_depth`
// (a cyclic document always does).
std::string write_pickle(const PickleDocument& document, std::uint32_t max_depth = 64);

}  // namespace ferry
