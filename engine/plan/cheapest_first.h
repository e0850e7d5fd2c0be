// The loop `ferry plan` and the out-of-memory advice share: candidates in order of their predicted step
// time, each dry-run unless it is known too big without one, until enough fit or the dry runs are spent.
// The callers say what a candidate is (a whole plan, or a combination of changes to one), how it is
// measured and how candidates compare; the order, the skipping and the budget are this loop's.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

struct CheapestFirstSearch {
  std::size_t candidates = 0;  // indices 0..candidates-1, in order of predicted step time
  std::size_t wanted = 1;      // fitting candidates to find
  std::size_t budget = 1;      // dry runs at most
  // Dry-runs a candidate: does it fit?
  std::function<bool(std::size_t)> measure;
  // Why a candidate is too big without a dry run (a floor under its peak over the limit), if it is.
  std::function<std::optional<std::string>(std::size_t)> too_big_unmeasured;
  // Does candidate `a` hold at least as much memory as `b` (too big where `b` is)?
  std::function<bool(std::size_t a, std::size_t b)> holds_no_less;
  // Optional: is `a` `b` with more changes (a costlier extension, no answer where `b` fits)?
  std::function<bool(std::size_t a, std::size_t b)> extends;
  // Optional: is a candidate likely too big (it waits until the rest are measured; one cheaper than the
  // cheapest fit is measured then, within the budget)?
  std::function<bool(std::size_t)> likely_too_big;
};

struct CheapestFirstOutcome {
  enum class Verdict : unsigned char { fits, too_big, too_big_unmeasured, too_big_as, extends_a_fit, not_reached };
  Verdict verdict = Verdict::not_reached;
  std::string why;          // too_big_unmeasured: the caller's reason
  std::size_t as = 0;       // too_big_as: the candidate measured too big it holds no less than; extends_a_fit: the fit
};

struct CheapestFirstResult {
  std::vector<CheapestFirstOutcome> outcomes;  // one per candidate
  std::size_t measured = 0;
  std::size_t fitting = 0;
  bool budget_spent = false;  // the loop stopped for the budget (else for `wanted`, or it ran out of candidates)
};

CheapestFirstResult search_cheapest_first(const CheapestFirstSearch& search);

}  // namespace ferry
