// Explain: why a query matched nothing (or little). Pure logic over the same predicate the
// matcher uses, so the explanation can never disagree with the result (DESIGN.md §6: "never
// fall back silently").
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "market/offer.h"
#include "market/query.h"

namespace sluice::market {

struct TermElimination {
  std::string term;       // canonical text of the term, e.g. "price < 2.5"
  size_t eliminated = 0;  // offers this term alone rules out
};

struct NearMiss {
  Offer offer;
  std::vector<std::string> failed;  // the terms this offer fails
};

struct Explanation {
  size_t offers = 0;                      // offers considered
  std::vector<TermElimination> per_term;  // in query order
  std::vector<NearMiss> nearest;          // offers failing the fewest terms, cheapest first
};

// Counts, for each term, how many of `offers` it eliminates, and picks the `nearest` offers
// that fail the fewest terms (ties: cheaper first, then id).
Explanation Explain(const Query& query, const std::vector<Offer>& offers, size_t nearest);

Json ToJson(const Explanation& e);

// One line for a job's reason: "of 3 offers, `gpus>=4` rules out 3, `vram>=90` rules out 2;
// nearest: n1/h100-80gb lacks gpus>=4". Terms that rule out nothing are left out.
std::string Summary(const Explanation& e);

}  // namespace sluice::market
