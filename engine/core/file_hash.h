// The XXH64 of a whole file, read 4 MiB at a time (the process never holds more of it): what a checkpoint's
// DONE marker records for each of its files and checks on resume, so a flipped byte is found. Equal to
// `xxhsum -H1 FILE`.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

// Throws FileError (engine/core/atomic_file.h) naming the file when it is not a readable regular file.
std::uint64_t xxhash64_of_file(const std::string& path);

}  // namespace ferry
