// The alignment O_DIRECT needs for buffers, offsets and lengths on a file system, asked with
// statx(STATX_DIOALIGN) (Linux 6.1+): the larger of the memory and offset alignments, 4096 when the
// file system does not say. Also the probe that tells whether a directory takes O_DIRECT at all.
#pragma once

#include <cstddef>
#include <string>

namespace ferry::offload {

constexpr std::size_t default_direct_io_alignment = 4096;

// Alignment for the open file `descriptor`; 4096 when statx does not report one (or reports zero).
std::size_t direct_io_alignment(int descriptor);

// Opens an unnamed temporary file in `directory` with O_DIRECT (nothing is left behind) and returns
// its alignment. Throws NvmeError when the file system refuses O_DIRECT (naming the fix: another
// --nvme-path). When the file system has no unnamed temporary files, returns 4096 and leaves the
// O_DIRECT check to the first file the store opens.
std::size_t probe_directory_alignment(const std::string& directory);

// The NvmeError message for a file system that refuses O_DIRECT.
std::string direct_io_unsupported_message(const std::string& directory);

}  // namespace ferry::offload
