#include "allocator/rmm_trace.h"

#include <charconv>
#include <fstream>
#include <istream>
#include <ostream>

namespace ferry {

namespace {

constexpr std::string_view kHeader = "Thread,Time,Action,Pointer,Size,Stream";

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

// Decimal, or hexadecimal with a 0x prefix.
bool parse_integer(std::string_view text, std::uint64_t& value) {
  text = trim(text);
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::vector<RmmTraceRecord> read_rmm_trace(std::istream& input, const std::string& file_name) {
  std::vector<RmmTraceRecord> records;
  std::string line;
  std::size_t number = 0;
  if (!std::getline(input, line)) throw TraceFormatError(file_name, 1, "empty file; expected the header " + std::string(kHeader));
  number = 1;
  if (trim(line) != kHeader) {
    throw TraceFormatError(file_name, 1, "header is '" + std::string(trim(line)) + "', expected '" + std::string(kHeader) + "'");
  }
  while (std::getline(input, line)) {
    ++number;
    std::string_view text = trim(line);
    if (text.empty()) continue;
    std::string_view fields[6];
    std::size_t count = 0;
    while (count < 6) {
      const std::size_t comma = text.find(',');
      fields[count++] = trim(text.substr(0, comma));
      if (comma == std::string_view::npos) {
        text = {};
        break;
      }
      text.remove_prefix(comma + 1);
    }
    if (count != 6 || !text.empty()) {
      throw TraceFormatError(file_name, number, "expected 6 comma-separated fields (Thread,Time,Action,Pointer,Size,Stream)");
    }
    RmmTraceRecord record;
    record.line = number;
    record.time = std::string(fields[1]);
    if (!parse_integer(fields[0], record.thread)) throw TraceFormatError(file_name, number, "bad thread id '" + std::string(fields[0]) + "'");
    if (fields[2] == "allocate") {
      record.action = RmmAction::allocate;
    } else if (fields[2] == "free") {
      record.action = RmmAction::free;
    } else if (fields[2] == "allocate failure") {
      record.action = RmmAction::allocate_failure;
    } else {
      throw TraceFormatError(file_name, number,
                             "unknown action '" + std::string(fields[2]) + "' (expected allocate, free or allocate failure)");
    }
    std::uint64_t pointer = 0;
    std::uint64_t size = 0;
    if (!parse_integer(fields[3], pointer)) throw TraceFormatError(file_name, number, "bad pointer '" + std::string(fields[3]) + "'");
    if (!parse_integer(fields[4], size)) throw TraceFormatError(file_name, number, "bad size '" + std::string(fields[4]) + "'");
    if (!parse_integer(fields[5], record.stream)) throw TraceFormatError(file_name, number, "bad stream '" + std::string(fields[5]) + "'");
    record.pointer = static_cast<std::uintptr_t>(pointer);
    record.size = static_cast<std::size_t>(size);
    records.push_back(std::move(record));
  }
  return records;
}

std::vector<RmmTraceRecord> read_rmm_trace_file(const std::string& path) {
  std::ifstream input(path);
  if (!input) throw TraceFormatError(path, 0, "cannot open the trace file");
  return read_rmm_trace(input, path);
}

void write_rmm_trace(std::ostream& output, const std::vector<RmmTraceRecord>& records) {
  output << kHeader << '\n';
  for (const RmmTraceRecord& record : records) {
    const char* action = record.action == RmmAction::allocate ? "allocate"
                         : record.action == RmmAction::free   ? "free"
                                                              : "allocate failure";
    output << record.thread << ',' << record.time << ',' << action << ",0x" << std::hex << record.pointer << std::dec
           << ',' << record.size << ',' << record.stream << '\n';
  }
}

}  // namespace ferry
