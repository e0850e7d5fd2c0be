// Training progress on the terminal: a live line rewritten every step on a TTY (step, loss, tokens/s,
// peak device memory, ETA; a dry run's shows memory only), plain lines every N steps otherwise (logs, CI).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>

namespace ferry {

struct StepProgress {
  std::int64_t step = 0;  // 1-based
  std::int64_t total_steps = 0;
  double loss = 0;
  double tokens_per_second = 0;
  double learning_rate = 0;
  double gradient_norm = 0;
  std::int64_t peak_allocated_bytes = 0;
  double seconds_left = 0;
  bool dry_run = false;  // meta: no loss, rate or norm exists, only memory
  std::optional<double> eval_loss;  // --eval-data, on the steps that evaluated
};

class ProgressPrinter {
 public:
  // A null stream prints nothing (the ranks other than rank 0).
  ProgressPrinter(std::FILE* stream, bool live, std::int64_t every);
  ~ProgressPrinter();
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;

  void update(const StepProgress& progress);
  // Ends the live line.
  void finish();

 private:
  std::FILE* stream_;
  bool live_;
  std::int64_t every_;
  bool line_open_ = false;
};

// True when the stream is a terminal.
bool is_terminal(std::FILE* stream);

}  // namespace ferry
