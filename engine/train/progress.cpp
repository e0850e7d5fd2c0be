#include "engine/train/progress.h"

#include <unistd.h>

#include <string>

#include "allocator/byte_size.h"

namespace ferry {
namespace {

std::string format_duration(double seconds) {
  const auto total = static_cast<long long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", total / 3600, (total / 60) % 60, total % 60);
  return text;
}

}  // namespace

bool is_terminal(std::FILE* stream) { return ::isatty(::fileno(stream)) == 1; }

ProgressPrinter::ProgressPrinter(std::FILE* stream, bool live, std::int64_t every)
    : stream_(stream), live_(live), every_(every > 0 ? every : 1) {}

ProgressPrinter::~ProgressPrinter() { finish(); }

void ProgressPrinter::update(const StepProgress& p) {
  if (stream_ == nullptr) return;  // a silent rank
  const bool last = p.step == p.total_steps;
  if (!live_ && !(p.step % every_ == 0 || last || p.step == 1 || p.eval_loss)) return;
  if (p.dry_run) {
    std::fprintf(stream_, "%sstep %5lld/%lld | dry run: no values computed | peak allocated %s%s", live_ ? "\r" : "",
                 static_cast<long long>(p.step), static_cast<long long>(p.total_steps),
                 format_bytes(static_cast<std::size_t>(p.peak_allocated_bytes)).c_str(), live_ ? "\x1b[K" : "\n");
  } else {
    char eval[48] = "";
    if (p.eval_loss) std::snprintf(eval, sizeof eval, " | val loss %.4f", *p.eval_loss);
    std::fprintf(stream_, "%sstep %5lld/%lld | loss %.4f%s | lr %.2e | grad norm %.3f | %.0f tok/s | peak %s | ETA %s%s",
                 live_ ? "\r" : "", static_cast<long long>(p.step), static_cast<long long>(p.total_steps), p.loss, eval,
                 p.learning_rate, p.gradient_norm, p.tokens_per_second,
                 format_bytes(static_cast<std::size_t>(p.peak_allocated_bytes)).c_str(), format_duration(p.seconds_left).c_str(),
                 live_ ? "\x1b[K" : "\n");
  }
  std::fflush(stream_);
  line_open_ = live_;
}

void ProgressPrinter::finish() {
  if (line_open_) {
    std::fputc('\n', stream_);
    std::fflush(stream_);
    line_open_ = false;
  }
}

}  // namespace ferry
