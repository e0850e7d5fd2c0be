// Safetensors files written by several processes at once: one creates the file at its full size with
// its header (the data zeros, sparse), then each fills the tensor ranges it owns in place. This is how
// the ranks of a grid write one consolidated checkpoint file without gathering it on one rank.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/safetensors.h"

namespace ferry {

// Creates `path` (it must not exist) holding `entries` (name, dtype and shape; laid end to end in this
// order) and `metadata`, every data byte zero. Throws FileError naming the path.
void create_sized_safetensors(const std::string& path, std::vector<SafetensorsEntry> entries,
                              const std::map<std::string, std::string>& metadata);

// Writes elements of a sized file's tensors in place. Throws SafetensorsError for a tensor the file
// lacks, a dtype other than the data's or a range past the tensor; FileError for the I/O.
class SafetensorsFiller {
 public:
  explicit SafetensorsFiller(const std::string& path);
  ~SafetensorsFiller();
  SafetensorsFiller(const SafetensorsFiller&) = delete;
  SafetensorsFiller& operator=(const SafetensorsFiller&) = delete;

  // Elements [first, first + count) of tensor `name` (row-major) from `data`, of `dtype`.
  void write(const std::string& name, DType dtype, std::int64_t first, std::int64_t count, const void* data);
  // Makes what was written durable (fsync).
  void sync();

 private:
  SafetensorsFile layout_;
  int fd_ = -1;
};

}  // namespace ferry
