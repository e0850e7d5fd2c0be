#include "engine/plan/cheapest_first.h"

#include <algorithm>

namespace ferry {

CheapestFirstResult search_cheapest_first(const CheapestFirstSearch& search) {
  CheapestFirstResult result;
  result.outcomes.resize(search.candidates);
  std::vector<std::size_t> too_big, fits, waiting;
  using Verdict = CheapestFirstOutcome::Verdict;
  // Passed over without a dry run: a floor over the limit, or no less than one measured too big.
  const auto judged_unmeasured = [&](std::size_t i) {
    CheapestFirstOutcome& outcome = result.outcomes[i];
    if (search.too_big_unmeasured) {
      if (std::optional<std::string> why = search.too_big_unmeasured(i)) {
        outcome = {Verdict::too_big_unmeasured, std::move(*why), 0};
        return true;
      }
    }
    for (const std::size_t other : too_big) {
      if (search.holds_no_less(i, other)) {
        outcome = {Verdict::too_big_as, "", other};
        return true;
      }
    }
    if (search.extends) {
      for (const std::size_t fit : fits) {
        if (search.extends(i, fit)) {
          outcome = {Verdict::extends_a_fit, "", fit};
          return true;
        }
      }
    }
    return false;
  };
  const auto measure = [&](std::size_t i) {
    ++result.measured;
    const bool fit = search.measure(i);
    result.outcomes[i].verdict = fit ? Verdict::fits : Verdict::too_big;
    (fit ? fits : too_big).push_back(i);
    if (fit) ++result.fitting;
  };
  const auto stop = [&] {
    if (result.measured >= search.budget) result.budget_spent = true;
    return result.fitting >= search.wanted || result.measured >= search.budget;
  };
  for (std::size_t i = 0; i < search.candidates && !stop(); ++i) {
    if (judged_unmeasured(i)) continue;
    if (search.likely_too_big && search.likely_too_big(i)) {
      waiting.push_back(i);
      continue;
    }
    measure(i);
  }
  // Those that waited, cheapest first, while the budget lasts: past `wanted`, only those cheaper than
  // the cheapest fit (savings can add up to more than their sum).
  for (const std::size_t i : waiting) {
    if (result.measured >= search.budget) {
      result.budget_spent = true;
      break;
    }
    if (result.fitting >= search.wanted && !fits.empty() && i > *std::min_element(fits.begin(), fits.end())) break;
    if (!judged_unmeasured(i)) measure(i);
  }
  return result;
}

}  // namespace ferry
