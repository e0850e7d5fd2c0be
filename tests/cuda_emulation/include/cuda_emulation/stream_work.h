// Work an emulated stream completes later than it was issued. Kernels, copies and products run when
// they are issued; the emulated NCCL's operations cannot (they wait for their peers), so each is deferred
// on its stream and completes when its peers' parts arrive, as on a GPU: an event recorded after it is
// not ready until then, and work issued to that stream later first waits for it.
#pragma once

#include <functional>

#include "cuda_emulation/runtime_api.h"

namespace ferry::cuda_emulation {

// Advances deferred work: returns whether it is complete. Asked with `wait` true it returns only once
// complete (blocking the host, as a stream synchronization does). It never calls the runtime.
using DeferredWork = std::function<bool(bool wait)>;

// Queues `work` on `stream` (nullptr, cudaStreamLegacy: the legacy default stream) after what that stream
// has deferred so far.
void defer_on_stream(cudaStream_t stream, DeferredWork work);

// Completes the work deferred on `stream` (and, as CUDA orders the legacy default stream against the
// blocking streams, on those) before the caller runs work it issues there now.
void finish_deferred_work(cudaStream_t stream);

// Completes the work deferred on every stream (cudaDeviceSynchronize, cudaFree).
void finish_all_deferred_work();

}  // namespace ferry::cuda_emulation
