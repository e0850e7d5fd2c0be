// The emulated streams and events (cuda_emulation/runtime_api.h, stream_work.h). A stream runs kernels,
// copies and products when they are issued; what it cannot run then (the emulated NCCL's operations,
// which wait for their peers) is deferred in its queue and completes in order. An event recorded on a
// stream is ready once the work deferred there before it has completed (its time is the host's clock
// when it was seen ready); a stream told to wait for an event defers that wait. Host synchronization
// (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, cudaFree) completes the work,
// blocking as on a GPU; work issued later to a stream completes what that stream deferred first.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cuda_emulation/runtime_api.h"
#include "cuda_emulation/stream_work.h"

namespace ferry::cuda_emulation {
void set_last_error(cudaError_t error);  // runtime.cpp's
}  // namespace ferry::cuda_emulation

namespace {

using ferry::cuda_emulation::DeferredWork;
using Clock = std::chrono::steady_clock;

// One stream's deferred work, in issue order: `issued` items queued since it was made, `completed`
// of them done (the rest are in `pending`).
struct StreamQueue {
  explicit StreamQueue(bool blocks) : blocking(blocks) {}
  const bool blocking;  // ordered against the legacy default stream (made without cudaStreamNonBlocking)
  std::mutex mutex;
  std::deque<DeferredWork> pending;
  std::uint64_t issued = 0;
  std::uint64_t completed = 0;
};

// Advances `queue` until `target` items have completed, or (wait false) until one is not ready.
bool advance(StreamQueue& queue, std::uint64_t target, bool wait) {
  const std::lock_guard lock(queue.mutex);
  while (queue.completed < target) {
    if (!queue.pending.front()(wait)) return false;
    queue.pending.pop_front();
    ++queue.completed;
  }
  return true;
}

bool finish(StreamQueue& queue, bool wait) {
  std::uint64_t target = 0;
  {
    const std::lock_guard lock(queue.mutex);
    target = queue.issued;
  }
  return advance(queue, target, wait);
}

// Every stream made and not destroyed, and the legacy default stream.
struct Streams {
  std::mutex mutex;
  std::vector<std::shared_ptr<StreamQueue>> made;
  std::shared_ptr<StreamQueue> legacy = std::make_shared<StreamQueue>(true);
};
Streams& streams() {
  static Streams all;
  return all;
}

std::vector<std::shared_ptr<StreamQueue>> blocking_queues() {
  Streams& all = streams();
  const std::lock_guard lock(all.mutex);
  std::vector<std::shared_ptr<StreamQueue>> blocking{all.legacy};
  for (const auto& queue : all.made) {
    if (queue->blocking) blocking.push_back(queue);
  }
  return blocking;
}

}  // namespace

struct CUstream_st {
  unsigned int flags;
  std::shared_ptr<StreamQueue> queue;
};
struct CUevent_st {
  unsigned int flags;
  std::shared_ptr<StreamQueue> queue;  // where it was last recorded (null: never recorded)
  std::uint64_t target = 0;            // the items of that queue issued before the record
  std::optional<Clock::time_point> recorded = std::nullopt;  // when it was seen ready
};

namespace {

bool is_legacy(cudaStream_t stream) { return stream == nullptr || stream == cudaStreamLegacy; }

std::shared_ptr<StreamQueue> queue_of(cudaStream_t stream) { return is_legacy(stream) ? streams().legacy : stream->queue; }

// Whether the work before the event's record has completed (waiting for it when `wait`).
bool event_ready(CUevent_st& event, bool wait) {
  if (event.queue == nullptr) return true;  // never recorded: ready, as in CUDA
  if (!advance(*event.queue, event.target, wait)) return false;
  if (!event.recorded) event.recorded = Clock::now();
  return true;
}

cudaError_t report(cudaError_t error) {
  ferry::cuda_emulation::set_last_error(error);
  return error;
}

}  // namespace

namespace ferry::cuda_emulation {

void defer_on_stream(cudaStream_t stream, DeferredWork work) {
  const std::shared_ptr<StreamQueue> queue = queue_of(stream);
  const std::lock_guard lock(queue->mutex);
  queue->pending.push_back(std::move(work));
  ++queue->issued;
}

void finish_deferred_work(cudaStream_t stream) {
  const std::shared_ptr<StreamQueue> queue = queue_of(stream);
  if (!queue->blocking) {
    finish(*queue, true);
    return;
  }
  for (const auto& each : blocking_queues()) finish(*each, true);
}

void finish_all_deferred_work() {
  std::vector<std::shared_ptr<StreamQueue>> all;
  {
    const std::lock_guard lock(streams().mutex);
    all = streams().made;
    all.push_back(streams().legacy);
  }
  for (const auto& queue : all) finish(*queue, true);
}

}  // namespace ferry::cuda_emulation

using ferry::cuda_emulation::finish_deferred_work;

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  auto queue = std::make_shared<StreamQueue>((flags & cudaStreamNonBlocking) == 0);
  {
    const std::lock_guard lock(streams().mutex);
    streams().made.push_back(queue);
  }
  *stream = new CUstream_st{flags, std::move(queue)};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || is_legacy(stream)) return report(cudaErrorInvalidResourceHandle);
  finish(*stream->queue, true);  // CUDA completes a destroyed stream's work; here before it goes
  {
    const std::lock_guard lock(streams().mutex);
    std::erase(streams().made, stream->queue);
  }
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  finish_deferred_work(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) { return finish(*queue_of(stream), false) ? cudaSuccess : cudaErrorNotReady; }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return report(cudaErrorInvalidResourceHandle);
  if (event_ready(*event, false)) return cudaSuccess;
  // The stream's later work waits for what the event waits for.
  ferry::cuda_emulation::defer_on_stream(stream, [queue = event->queue, target = event->target](bool wait) { return advance(*queue, target, wait); });
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  ferry::cuda_emulation::finish_all_deferred_work();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st{flags, nullptr};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return report(cudaErrorInvalidResourceHandle);
  // The legacy default stream's record waits for the blocking streams too.
  if (is_legacy(stream)) finish_deferred_work(stream);
  event->queue = queue_of(stream);
  {
    const std::lock_guard lock(event->queue->mutex);
    event->target = event->queue->issued;
  }
  event->recorded.reset();
  event_ready(*event, false);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return report(cudaErrorInvalidResourceHandle);
  return event_ready(*event, false) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return report(cudaErrorInvalidResourceHandle);
  event_ready(*event, true);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  if (milliseconds == nullptr) return report(cudaErrorInvalidValue);
  if (start == nullptr || end == nullptr || ((start->flags | end->flags) & cudaEventDisableTiming) != 0 || start->queue == nullptr ||
      end->queue == nullptr) {
    return report(cudaErrorInvalidResourceHandle);
  }
  if (!event_ready(*start, false) || !event_ready(*end, false)) return report(cudaErrorNotReady);
  *milliseconds = std::chrono::duration<float, std::milli>(*end->recorded - *start->recorded).count();
  return cudaSuccess;
}
