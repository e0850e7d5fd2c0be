// Activation recompute policies: which blocks keep everything, which drop the attention probabilities
// and the GELU output (selective), and which keep only their input (full). A policy is a per-block
// plan; the trainer hands it to the model, which does the keeping and the recomputing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

enum class RecomputeKind : std::uint8_t { none, full, selective, every, first, automatic };
// What one block recomputes in backward.
enum class BlockRecompute : std::uint8_t { none, selective, full };

struct RecomputePolicy {
  RecomputeKind kind = RecomputeKind::none;
  // every:K: full recompute on every K-th block (blocks K-1, 2K-1, ...); first:N: on blocks 0..N-1
  // (Megatron's recompute_method "block").
  std::int64_t every = 0;

  // "none", "full", "selective", "every:K", "first:N", "auto"; throws std::invalid_argument naming the choices.
  static RecomputePolicy parse(std::string_view text);
  std::string name() const;
  // The plan for `layers` blocks (auto must be resolved to another policy first).
  std::vector<BlockRecompute> plan(std::int64_t layers) const;
};

// The policies auto chooses among: none, selective, first:N for N = 1 .. layers-1, full. first:N
// rather than every:K: at the same count it recomputes the same FLOPs, but its blocks' backward comes
// last, when the later blocks' activations are already freed, so its peak is lower (every:K's last
// recomputed block is the first backward runs, at the peak).
std::vector<RecomputePolicy> recompute_candidates(std::int64_t layers);
// A few of them for tables: none, selective, first:N at a quarter, half and three quarters, full.
std::vector<RecomputePolicy> recompute_overview(std::int64_t layers);

}  // namespace ferry
