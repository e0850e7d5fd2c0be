// Loading NCCL where the NCCL backend is first used: the NCCL functions ferry calls are defined in
// nccl_loader.cpp and forward to the libnccl found at run time, so one ferry binary runs on machines with
// and without NCCL (only --device cuda with several ranks needs it). Private to engine/comm.
#pragma once

namespace ferry {

// Opens libnccl once per process: $FERRY_NCCL_LIBRARY when set, else libnccl.so.2 on the dynamic
// loader's path, else the library the build was configured with. Throws CommunicationError naming every
// path tried, the loader's words and the fix (install NCCL, or set FERRY_NCCL_LIBRARY) when none loads,
// when a function ferry calls is missing, or when the library is older than the headers the build used.
void load_nccl_library();

}  // namespace ferry
