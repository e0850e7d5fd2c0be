// A bounded reader for the subset of Python's pickle format (protocols 2 to 5) that PyTorch memory
// snapshots use: dicts, lists, tuples, str, bytes, int, float, bool, None and the memo. It runs no
// Python and builds no objects: any other opcode, truncated data or a limit passed is a PickleError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/snapshot/pickle_document.h"

namespace ferry {

// What went wrong and where: the file, the byte offset of the opcode, and the opcode.
class PickleError : public std::runtime_error {
 public:
  PickleError(const std::string& file, std::size_t offset, int opcode, const std::string& problem);
  const std::string& file() const { return file_; }
  std::size_t offset() const { return offset_; }
  int opcode() const { return opcode_; }  // -1: none (the data ended, or a whole-file limit)

 private:
  std::string file_;
  std::size_t offset_;
  int opcode_;
};

struct PickleLimits {
  std::size_t max_bytes = std::size_t{4} << 30;  // the whole pickle
  std::uint32_t max_depth = 64;                  // containers inside containers (snapshots need 6)
  std::size_t max_stack = std::size_t{1} << 26;   // values waiting on the stack (Python keeps them all)
};

// "GLOBAL" for 'c', "0x63" style names for bytes that are no opcode.
std::string pickle_opcode_name(int opcode);

PickleDocument read_pickle(std::string_view data, const std::string& file_name, const PickleLimits& limits = {});
PickleDocument read_pickle_file(const std::string& path, const PickleLimits& limits = {});

}  // namespace ferry
