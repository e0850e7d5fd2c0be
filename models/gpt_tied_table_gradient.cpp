// GptModel's deferred tied-table gradient (TiedTableGradient::deferred): after the embedding's backward,
// the token table's gradient reaches the sink one vocabulary slice at a time, the LM head's part
// (recomputed from the kept head input and softmax statistics, chunk by chunk as the head ran) and the
// embedding's rows summed into the slice, which is then complete. The additions are those of the
// as-computed order (head chunks, then embedding rows), so the gradient is bitwise the same.
#include <algorithm>

#include "engine/core/op_recorder.h"
#include "models/gpt_model.h"
#include "models/gpt_parameter_use.h"
#include "models/tensor_ops.h"

namespace ferry {

void GptModel::tied_table_backward(const DeferredTableGradient& deferred) {
  const ParameterUse held(*this, table_indices(), false);
  const OpScope op(*device_, "backward", "lm_head.table");
  const std::int64_t C = config_.hidden, V = config_.vocab, rows = deferred.head_input.size(0);
  const std::int64_t slice = vocab_slice();
  for (std::int64_t first = 0; first < V; first += slice) {
    const std::int64_t count = std::min(slice, V - first);
    const Tensor table = table_rows_f32(first, count);
    const Tensor dweight = gradient_bucket({count, C}, "wte.weight.slice");
    for (std::int64_t start = 0; start < rows; start += deferred.chunk) {
      const std::int64_t length = std::min(deferred.chunk, rows - start);
      const Tensor x = ops::as_f32(deferred.head_input.narrow(0, start, length), "lm_head.in.f32");
      const Tensor logits = workspace({length, count}, "lm_head.logits.slice");
      ops::lm_head_logits_slice(logits, 0, x, table);
      ops::cross_entropy_backward_slice(logits, deferred.softmax_rows.narrow(0, start, length), deferred.targets.narrow(0, start, length), first,
                                        deferred.dloss);
      // The chunk's part apart, then added: the as-computed head's rounding.
      const Tensor part = gradient_bucket({count, C}, "wte.weight.part");
      ops::lm_head_backward_slice(Tensor(), false, part, logits, 0, x, table);
      ops::residual_forward(dweight, dweight, part);
    }
    ops::encoder_backward_token_rows(dweight, deferred.embedding_rows, deferred.tokens, first);
    sink().accumulate(GptParameters::kWteIndex, first * C, dweight);
    sink().piece_complete(GptParameters::kWteIndex, first * C, count * C);
  }
  sink().parameter_complete(GptParameters::kWteIndex);
}

}  // namespace ferry
