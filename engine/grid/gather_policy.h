// GatherPolicy: what ZeRO stage 3 keeps gathered beyond the layer that runs, as DeepSpeed's stage-3 keys
// and FSDP2's reshard_after_forward say it. Every choice is made in the plan's order of layers, never by
// timing, so what is gathered at once stays a function of the plan and the dry run predicts it exactly.
#pragma once

#include <cstdint>
#include <limits>

namespace ferry {

struct GatherPolicy {
  // FSDP2's reshard_after_forward: a block's parameters are freed after its forward and gathered again for
  // its backward; false keeps them from forward to backward (stage 2's gather traffic).
  bool reshard_after_forward = true;
  // stage3_prefetch_bucket_size > 0: the next layer's gather starts while this one runs (one layer ahead
  // at most); 0 gathers each layer when it starts.
  bool prefetch = true;
  // stage3_max_live_parameters: the elements kept gathered beyond the running layer (blocks kept for
  // their backward, the prefetched layer) stay at or below this; a choice that would pass it is not made
  // (the block is resharded, the prefetch skipped). The running layer is always gathered. Default: no
  // bound (DeepSpeed's 1e9 when a config gives it).
  std::int64_t max_live_elements = std::numeric_limits<std::int64_t>::max();
};

}  // namespace ferry
