#include "offload/direct_io_alignment.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "offload/file_descriptor.h"
#include "offload/nvme_store.h"

namespace ferry::offload {

std::size_t direct_io_alignment(int descriptor) {
  struct statx attributes {};
  if (::statx(descriptor, "", AT_EMPTY_PATH, STATX_DIOALIGN, &attributes) != 0) return default_direct_io_alignment;
  if ((attributes.stx_mask & STATX_DIOALIGN) == 0) return default_direct_io_alignment;
  const std::size_t alignment = std::max<std::size_t>(attributes.stx_dio_mem_align, attributes.stx_dio_offset_align);
  return alignment == 0 ? default_direct_io_alignment : alignment;
}

std::string direct_io_unsupported_message(const std::string& directory) {
  return "the file system of '" + directory +
         "' does not support O_DIRECT (direct I/O), which the NVMe store needs: choose another --nvme-path "
         "on a local file system such as ext4 or xfs on an NVMe drive";
}

std::size_t probe_directory_alignment(const std::string& directory) {
  FileDescriptor probe(::open(directory.c_str(), O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600));
  if (probe.valid()) return direct_io_alignment(probe.get());
  const int direct_error = errno;
  if (direct_error == EINVAL) {
    // EINVAL is O_DIRECT refused, or O_TMPFILE unknown: ask again without O_DIRECT to tell them apart.
    FileDescriptor buffered(::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
    if (buffered.valid()) throw NvmeError(directory, 0, EINVAL, direct_io_unsupported_message(directory));
    return default_direct_io_alignment;
  }
  if (direct_error == EOPNOTSUPP || direct_error == EISDIR) return default_direct_io_alignment;
  throw NvmeError(directory, 0, direct_error,
                  "cannot open a file in '" + directory + "': " + std::strerror(direct_error) +
                      " (choose another --nvme-path the process can write to)");
}

}  // namespace ferry::offload
