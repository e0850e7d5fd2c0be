// Streams and events as the allocator sees them: opaque ids. A device implements EventSource so the
// allocator can defer reuse of a block until work queued on other streams has finished with it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>

namespace ferry {

using StreamId = std::uint64_t;
using EventId = std::uint64_t;

class EventSource {
 public:
  virtual ~EventSource() = default;
  // Records an event on `stream` after the work queued so far.
  virtual EventId record(StreamId stream) = 0;
  // True once the work before the event has completed. Never blocks.
  virtual bool query(EventId event) = 0;
  // Blocks until the event completed.
  virtual void synchronize(EventId event) = 0;
  // The allocator no longer needs the event.
  virtual void release(EventId event) = 0;
};

// Work runs at once (cpu and meta devices): every event is complete when recorded.
class ImmediateEventSource final : public EventSource {
 public:
  EventId record(StreamId) override { return ++last_event_; }
  bool query(EventId) override { return true; }
  void synchronize(EventId) override {}
  void release(EventId) override {}

 private:
  EventId last_event_ = 0;
};

// Events complete only when told: lets tests model work still running on other streams.
class ManualEventSource final : public EventSource {
 public:
  EventId record(StreamId stream) override {
    EventId event = ++last_event_;
    pending_.emplace(event, stream);
    return event;
  }
  bool query(EventId event) override { return !pending_.contains(event); }
  void synchronize(EventId event) override {
    pending_.erase(event);
    ++synchronize_calls_;
  }
  void release(EventId event) override { pending_.erase(event); }

  // Marks every event recorded so far on `stream` complete.
  void complete_stream(StreamId stream) {
    std::erase_if(pending_, [stream](const auto& entry) { return entry.second == stream; });
  }
  void complete_all() { pending_.clear(); }
  std::size_t pending_count() const { return pending_.size(); }
  std::size_t synchronize_calls() const { return synchronize_calls_; }

 private:
  EventId last_event_ = 0;
  std::unordered_map<EventId, StreamId> pending_;
  std::size_t synchronize_calls_ = 0;
};

}  // namespace ferry
