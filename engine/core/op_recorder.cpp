#include "engine/core/op_recorder.h"

#include <algorithm>
#include <chrono>

#include "engine/core/device.h"

namespace ferry {

std::uint64_t steady_now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::size_t OpRecorder::begin(std::string_view kind, std::string name, StreamId stream) {
  const auto depth = static_cast<std::int32_t>(
      std::count_if(open_.begin(), open_.end(), [&](std::size_t open) { return markers_[open].stream == stream; }));
  markers_.push_back(OpMarker{std::string(kind), std::move(name), stream, steady_now_ns(), 0, depth});
  open_.push_back(markers_.size() - 1);
  return markers_.size() - 1;
}

void OpRecorder::end(std::size_t index) {
  if (index >= markers_.size()) return;  // cleared while the op ran
  markers_[index].end_ns = steady_now_ns();
  std::erase(open_, index);
}

void OpRecorder::clear() {
  markers_.clear();
  open_.clear();
}

OpScope::OpScope(Device& device, std::string_view kind, std::string name, StreamId stream) {
  OpRecorder& recorder = device.op_recorder();
  if (!recorder.enabled()) return;
  recorder_ = &recorder;
  index_ = recorder.begin(kind, std::move(name), stream);
}

OpScope::~OpScope() {
  if (recorder_ != nullptr) recorder_->end(index_);
}

void OpRecorder::add(OpMarker marker) {
  if (!enabled_) return;
  marker.depth = 0;
  markers_.push_back(std::move(marker));
}

}  // namespace ferry
