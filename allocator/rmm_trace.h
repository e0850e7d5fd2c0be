// RMM's logging_resource_adaptor CSV (header Thread,Time,Action,Pointer,Size,Stream; actions
// allocate, free, allocate failure): the allocation-trace format users already have. Read and write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/allocator_errors.h"

namespace ferry {

// A malformed trace: names the file and the line.
class TraceFormatError : public AllocatorError {
 public:
  TraceFormatError(const std::string& file, std::size_t line, const std::string& problem)
      : AllocatorError(file + ":" + std::to_string(line) + ": " + problem), line_(line) {}
  std::size_t line() const { return line_; }

 private:
  std::size_t line_;
};

enum class RmmAction : std::uint8_t { allocate, free, allocate_failure };

struct RmmTraceRecord {
  std::uint64_t thread = 0;
  std::string time;
  RmmAction action = RmmAction::allocate;
  std::uintptr_t pointer = 0;
  std::size_t size = 0;
  std::uint64_t stream = 0;
  std::size_t line = 0;  // 1-based line in the file (the header is line 1)
};

std::vector<RmmTraceRecord> read_rmm_trace(std::istream& input, const std::string& file_name);
std::vector<RmmTraceRecord> read_rmm_trace_file(const std::string& path);
void write_rmm_trace(std::ostream& output, const std::vector<RmmTraceRecord>& records);

}  // namespace ferry
