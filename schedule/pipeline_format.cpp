// Pipeline schedules as text ("rank R: 0F0 0F1 - 0B0 ...", a '#' header line keeping the name and
// sizes) and as PyTorch's CSV (one row per rank, one cell per action, empty cells for bubbles), both ways.
#include <algorithm>
#include <charconv>
#include <sstream>

#include "schedule/pipeline_schedule.h"

namespace ferry {
namespace {

constexpr std::string_view kHeader = "# ferry pipeline schedule:";

std::string cell(const std::optional<PipelineAction>& action, std::string_view bubble) {
  return action ? action->to_string() : std::string(bubble);
}

// Lines of `text` without their line ends ("\n" or "\r\n"); no empty last line after a final line end.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  return lines;
}

ScheduleFormatError error_at(std::size_t line, std::size_t column, const std::string& message) {
  return ScheduleFormatError("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message);
}

std::int32_t parse_count(std::string_view digits, std::size_t line, std::size_t column, std::string_view what) {
  std::int32_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || value < 1) {
    throw error_at(line, column, std::string(what) + " must be a whole number >= 1, got '" + std::string(digits) + "'");
  }
  return value;
}

// What the header line declares; unset fields are inferred from the actions.
struct Declared {
  std::optional<std::string> name;
  std::optional<std::int32_t> ranks, stages, micro_batches;
};

void parse_header(std::string_view line, std::size_t line_number, Declared& declared) {
  std::size_t position = kHeader.size();
  while (position < line.size()) {
    if (line[position] == ' ' || line[position] == '\t') {
      ++position;
      continue;
    }
    const std::size_t end = std::min(line.find_first_of(" \t", position), line.size());
    const std::string_view field = line.substr(position, end - position);
    const std::size_t equals = field.find('=');
    const std::string_view key = field.substr(0, equals);
    const std::string_view value = equals == std::string_view::npos ? std::string_view() : field.substr(equals + 1);
    const std::size_t column = position + 1;
    if (key == "name" && !value.empty()) {
      declared.name = std::string(value);
    } else if (key == "ranks") {
      declared.ranks = parse_count(value, line_number, column, "ranks");
    } else if (key == "stages") {
      declared.stages = parse_count(value, line_number, column, "stages");
    } else if (key == "micro_batches") {
      declared.micro_batches = parse_count(value, line_number, column, "micro_batches");
    } else {
      throw error_at(line_number, column, "'" + std::string(field) +
                                               "' is not a header field: expected name=NAME ranks=P stages=S micro_batches=M");
    }
    position = end;
  }
}

// One cell or token at `column` (1-based): an action, or a bubble when it is empty or '-'.
std::optional<PipelineAction> parse_cell(std::string_view text, std::size_t line, std::size_t column) {
  if (text.empty() || text == "-") return std::nullopt;
  try {
    return PipelineAction::parse(text);
  } catch (const ScheduleFormatError& error) {
    throw error_at(line, column, std::string(error.what()) + "; '-' or an empty CSV cell is a bubble");
  }
}

// "rank R: a b - c": the actions after the optional "rank R:" label (R must be `expected_rank`).
RankActions parse_text_line(std::string_view line, std::size_t line_number, std::size_t expected_rank) {
  std::size_t position = 0;
  if (line.starts_with("rank")) {
    const std::size_t colon = line.find(':');
    std::string_view label = line.substr(4, colon == std::string_view::npos ? std::string_view::npos : colon - 4);
    while (label.starts_with(' ')) label.remove_prefix(1);
    std::size_t rank = 0;
    const auto [end, error] = std::from_chars(label.data(), label.data() + label.size(), rank);
    if (colon == std::string_view::npos || label.empty() || error != std::errc() || end != label.data() + label.size() ||
        rank != expected_rank) {
      throw error_at(line_number, 1, "expected 'rank " + std::to_string(expected_rank) + ":' (one line per rank, from rank 0 in order)");
    }
    position = colon + 1;
  }
  RankActions actions;
  while (position < line.size()) {
    if (line[position] == ' ' || line[position] == '\t') {
      ++position;
      continue;
    }
    const std::size_t end = std::min(line.find_first_of(" \t", position), line.size());
    actions.push_back(parse_cell(line.substr(position, end - position), line_number, position + 1));
    position = end;
  }
  return actions;
}

RankActions parse_csv_line(std::string_view line, std::size_t line_number) {
  RankActions actions;
  if (line.empty()) return actions;  // a rank with no actions
  std::size_t position = 0;
  while (true) {
    const std::size_t end = std::min(line.find(',', position), line.size());
    std::string_view text = line.substr(position, end - position);
    std::size_t column = position + 1;
    while (!text.empty() && (text.front() == ' ' || text.front() == '"')) {
      text.remove_prefix(1);
      ++column;
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '"')) text.remove_suffix(1);
    actions.push_back(parse_cell(text, line_number, column));
    if (end == line.size()) break;
    position = end + 1;
  }
  return actions;
}

bool is_comment(std::string_view line) {
  const std::size_t first = line.find_first_not_of(" \t");
  return first != std::string_view::npos && line[first] == '#';
}

}  // namespace

std::string format_pipeline_schedule(const PipelineSchedule& schedule) {
  std::ostringstream out;
  out << kHeader << " name=" << schedule.name << " ranks=" << schedule.ranks << " stages=" << schedule.stages
      << " micro_batches=" << schedule.micro_batches << "\n";
  // Compute-only lists are time slots: pad the cells to one width so the ranks' columns line up.
  std::size_t width = 1;
  if (!schedule.has_communication()) {
    for (const RankActions& rank : schedule.actions) {
      for (const std::optional<PipelineAction>& action : rank) width = std::max(width, cell(action, "-").size());
    }
  }
  for (std::size_t rank = 0; rank < schedule.actions.size(); ++rank) {
    std::string line = "rank " + std::to_string(rank) + ":";
    for (const std::optional<PipelineAction>& action : schedule.actions[rank]) {
      std::string text = cell(action, "-");
      line += " " + text + std::string(width - std::min(width, text.size()), ' ');
    }
    while (line.ends_with(' ')) line.pop_back();
    out << line << "\n";
  }
  return out.str();
}

std::string format_pipeline_schedule_csv(const PipelineSchedule& schedule) {
  std::string text;
  for (const RankActions& rank : schedule.actions) {
    std::string row;
    for (std::size_t index = 0; index < rank.size(); ++index) row += (index ? "," : "") + cell(rank[index], "");
    // Python's csv writes a row of one empty cell as "" (an empty line is a row with no cells).
    text += (rank.size() == 1 && !rank[0] ? "\"\"" : row) + "\n";
  }
  return text;
}

PipelineSchedule parse_pipeline_schedule(std::string_view text) {
  const std::vector<std::string_view> lines = split_lines(text);
  // CSV when a cell separator or a quoted cell shows up outside comments.
  bool csv = false;
  for (std::string_view line : lines) csv = csv || (!is_comment(line) && line.find_first_of(",\"") != std::string_view::npos);

  Declared declared;
  std::size_t header_line = 1;
  PipelineSchedule schedule;
  for (std::size_t index = 0; index < lines.size(); ++index) {
    const std::string_view line = lines[index];
    const std::size_t line_number = index + 1;
    if (line.starts_with(kHeader)) {
      parse_header(line, line_number, declared);
      header_line = line_number;
      continue;
    }
    if (is_comment(line)) continue;
    if (csv) {
      schedule.actions.push_back(parse_csv_line(line, line_number));
      continue;
    }
    const std::string_view content = line.substr(0, line.find('#'));  // '#' starts a comment
    if (content.find_first_not_of(" \t") == std::string_view::npos) continue;
    schedule.actions.push_back(parse_text_line(content, line_number, schedule.actions.size()));
  }
  // Trailing empty CSV rows are the file's blank end, not ranks without actions.
  while (csv && !schedule.actions.empty() && schedule.actions.back().empty()) schedule.actions.pop_back();
  if (schedule.actions.empty()) {
    throw ScheduleFormatError("line " + std::to_string(lines.size() + 1) +
                              ", column 1: no rank lines: expected 'rank 0: 0F0 0F1 - 0B0 ...' or CSV rows (one per rank)");
  }
  const auto lists = static_cast<std::int32_t>(schedule.actions.size());
  if (declared.ranks && *declared.ranks != lists) {
    throw ScheduleFormatError("line " + std::to_string(header_line) + ", column 1: the header declares ranks=" + std::to_string(*declared.ranks) + " but the file has " +
                              std::to_string(lists) + " rank lines");
  }
  std::int32_t last_stage = 0, last_micro_batch = 0;
  for (const RankActions& rank : schedule.actions) {
    for (const std::optional<PipelineAction>& action : rank) {
      if (!action) continue;
      last_stage = std::max(last_stage, action->stage);
      last_micro_batch = std::max(last_micro_batch, action->micro_batch);
    }
  }
  schedule.name = declared.name.value_or("custom");
  schedule.ranks = lists;
  // Inferred stages: the highest stage named, rounded up to whole model chunks per rank (in 64 bits: an
  // action may name stage 2^31 - 1).
  // (optional<int32_t>::value_or would narrow the inferred values back to 32 bits.)
  const std::int64_t stages = declared.stages ? *declared.stages : (std::int64_t{last_stage} / lists + 1) * lists;
  const std::int64_t micro_batches = declared.micro_batches ? *declared.micro_batches : std::int64_t{last_micro_batch} + 1;
  if (const std::string size = schedule_size_problem(lists, stages, micro_batches); !size.empty()) throw ScheduleFormatError(size);
  schedule.stages = static_cast<std::int32_t>(stages);  // within the bound, so within 32 bits
  schedule.micro_batches = static_cast<std::int32_t>(micro_batches);
  return schedule;
}

}  // namespace ferry
