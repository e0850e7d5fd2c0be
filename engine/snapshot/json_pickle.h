// JSON values as pickle values and back, for the part of a snapshot that ferry adds (its run metadata
// and ops): objects are dicts with string keys, arrays are lists. Bounded in depth and size.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/snapshot/pickle_document.h"

namespace ferry {

PickleRef json_to_pickle(PickleDocument& document, const nlohmann::json& value);
// Throws SnapshotError (naming `file` and `field`) for bytes, non-string dict keys, nesting deeper
// than 32 or more than a million values (shared values count each time they are reached).
nlohmann::json pickle_to_json(const PickleDocument& document, PickleRef ref, const std::string& file, const std::string& field);

}  // namespace ferry
