// Pipeline schedules in ferry's text format or PyTorch's CSV, parsed and, when parsed, validated
// (the validator walks every action: it must stay bounded).
#include <stdexcept>

#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_validator.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_schedule(const std::uint8_t* data, std::size_t size) {
  try {
    const PipelineSchedule schedule = parse_pipeline_schedule(text_of(data, size));
    (void)validate_pipeline_schedule(schedule);
  } catch (const std::exception& error) {
    require_own_words(error, text_of(data, size));  // ScheduleFormatError: a line and column
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_schedule)
