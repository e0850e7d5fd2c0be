// Byte sizes as people write them: parse "512MiB", "2GiB", "80GB", "1048576" and format bytes as
// "1.50 GiB"; durations as "85 us", "12.5 ms", "3.20 s". Used by the command line, reports and errors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry {

// Units: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024), K/M/G/T (powers of
// 1024). Throws std::invalid_argument naming the text when it is not a size.
std::size_t parse_byte_size(std::string_view text);

std::string format_bytes(std::size_t bytes);

// Seconds in the unit that reads best: microseconds below a millisecond, milliseconds below a second.
std::string format_seconds(double seconds);

}  // namespace ferry
