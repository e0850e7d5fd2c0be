// GradientSink: where a model's parameter gradients go when it does not hold them whole. Backward
// hands each piece to the sink as soon as it is complete and then frees it, so the device holds one
// gradient bucket at a time (a block's gradients, or a vocabulary slice of the embedding's).
// ZeRO-Offload's sink copies the pieces to host memory and accumulates them there.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/core/tensor.h"

namespace ferry {

class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // `gradient` (f32, contiguous) is this micro-batch's gradient of elements [offset, offset + numel)
  // of parameter `index` (the model's parameter order): add it. The tensor is freed after the call
  // (a sink that still copies from it then must record its copy stream on the tensor's storage).
  virtual void accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) = 0;
  // An embedding's gradient as rows: row i of `rows` ([n, width] f32) adds to row ids[i] (i32 [n]) of
  // parameter `index`, in order i = 0, 1, ... (the order the device's own kernel adds them in).
  virtual void accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) = 0;
  // This micro-batch's gradient of elements [offset, offset + count) of parameter `index` is complete:
  // every contribution to them has been handed over (a large weight's row slice, a slice of the tied
  // table), before the whole parameter is. A sink that reduces buckets may start those these elements
  // finish. A parameter's pieces complete in increasing order, each once per micro-batch.
  virtual void piece_complete(std::size_t index, std::int64_t offset, std::int64_t count) {
    (void)index;
    (void)offset;
    (void)count;
  }
  // This micro-batch's gradient of parameter `index` is complete: every piece of it has been handed
  // over (data parallelism starts reducing a bucket once all of its elements are complete). Called
  // once per parameter and micro-batch, in backward's order.
  virtual void parameter_complete(std::size_t index) { (void)index; }
};

}  // namespace ferry
