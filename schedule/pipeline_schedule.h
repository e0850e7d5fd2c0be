// Pipeline schedules: per-rank lists of actions in PyTorch's notation (`0F1` = stage 0 forward of
// micro-batch 1, `1B0`, `2I3`/`2W3` for Zero Bubble's split backward, `0SEND_F1`, `1RECV_B0`; an empty
// slot is a bubble). Stage s lives on rank s % ranks (one stage per rank, or V per rank interleaved).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// F: forward. B: full backward (input and weight gradients). I: backward for the input gradient only.
// W: the weight gradient (after its I). SEND_F/RECV_F move a stage's output to the next stage;
// SEND_B/RECV_B move the gradient of a stage's input to the previous stage.
enum class PipelineActionType : std::uint8_t {
  forward,
  backward,
  backward_input,
  backward_weight,
  send_forward,
  receive_forward,
  send_backward,
  receive_backward,
};

// A schedule text that does not parse, with the position and the expected form.
class ScheduleFormatError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct PipelineAction {
  std::int32_t stage = 0;
  PipelineActionType type = PipelineActionType::forward;
  std::int32_t micro_batch = 0;

  // "0F1", "1B0", "2I3", "2W3", "0SEND_F1", "1RECV_B0".
  std::string to_string() const;
  static PipelineAction parse(std::string_view text);  // throws ScheduleFormatError
  bool is_communication() const;
  bool operator==(const PipelineAction&) const = default;
};

// One rank's actions in order; std::nullopt is a bubble (an idle time slot).
using RankActions = std::vector<std::optional<PipelineAction>>;

struct PipelineSchedule {
  std::string name;             // the generator's name ("1f1b", "interleaved:2", ...) or "custom"
  std::int32_t ranks = 1;       // p
  std::int32_t stages = 1;      // p * V (V model chunks per rank)
  std::int32_t micro_batches = 1;
  std::vector<RankActions> actions;  // [rank]

  std::int32_t rank_of_stage(std::int32_t stage) const { return stage % ranks; }
  std::int32_t stages_per_rank() const { return stages / ranks; }
  bool splits_backward() const;  // uses I and W actions (Zero Bubble)
  bool has_communication() const;
};

// The largest schedule ferry builds or reads: stages x micro-batches actions of each kind plus a time
// slot per rank pair, about 4 million cells. Generating, lowering and validating cost about linear
// time and ~350 bytes per cell (pp 64 x 4096 micro-batches of 1f1b, 0.8 million cells: 20 s), so the
// largest takes about 1.5 GB and a minute and a half (interleaved:100000 on 4 ranks is refused).
inline constexpr std::int64_t kMaxScheduleCells = std::int64_t{1} << 22;
// Empty when a schedule of this shape is within kMaxScheduleCells; else the problem, naming the sizes.
std::string schedule_size_problem(std::int64_t ranks, std::int64_t stages, std::int64_t micro_batches);

// The generators' names, for help texts and errors.
std::vector<std::string> pipeline_schedule_names();  // gpipe, 1f1b, 1f1b-deep, interleaved:V, zb-h1
// Stages each rank holds under the named schedule: V for interleaved:V, else 1.
std::int32_t pipeline_stages_per_rank(std::string_view name);

// Compute actions only (F, B or I/W), one time slot per action at unit cost, bubbles where a stage
// waits. Throws std::invalid_argument naming the problem and the fix (unknown name, m < p where the
// schedule cannot run it, m not a multiple of p for interleaved, ...).
PipelineSchedule generate_pipeline_schedule(std::string_view name, std::int32_t ranks, std::int32_t micro_batches);

// Inserts SEND/RECV actions between stages on different ranks, ordered so that the lowered schedule
// cannot deadlock even when a send blocks until its receive is posted (rank-parity ordering where two
// peers would both send first). Bubbles are dropped. Idempotent on an already lowered schedule.
PipelineSchedule lower_pipeline_communication(const PipelineSchedule& compute);

struct ScheduleValidation {
  std::vector<std::string> problems;  // empty when valid; each names the action, the rank and the rule
  bool ok() const { return problems.empty(); }
};

// The reference's oracles: every stage has m F and m B (or m I and m W); B or I after its F; W after its
// I; F(s, j) after F(s-1, j) and B(s, j) after B(s+1, j) (checked by simulation); each send has one
// matching receive in the same order per peer pair; a dependency simulation always progresses.
ScheduleValidation validate_pipeline_schedule(const PipelineSchedule& schedule);

// Text: one line per rank, "rank R: 0F0 0F1 - 0B0 ..." ('-' is a bubble; '#' starts a comment).
// CSV: one row per rank, one cell per action (empty cell = bubble), as PyTorch's _dump_csv writes.
std::string format_pipeline_schedule(const PipelineSchedule& schedule);
std::string format_pipeline_schedule_csv(const PipelineSchedule& schedule);
// Parses either form (CSV when the text has commas); ranks, stages and micro-batches are inferred
// from the actions. Throws ScheduleFormatError with the line and column.
PipelineSchedule parse_pipeline_schedule(std::string_view text);

}  // namespace ferry
