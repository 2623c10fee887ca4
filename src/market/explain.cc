#include "market/explain.h"

#include <algorithm>
#include <tuple>

namespace sluice::market {

Explanation Explain(const Query& query, const std::vector<Offer>& offers, size_t nearest) {
  Explanation e;
  e.offers = offers.size();
  std::vector<std::string> names;
  for (const Term& t : query.terms) {
    Query one;
    one.terms.push_back(t);
    names.push_back(ToString(one));
    e.per_term.push_back({names.back(), 0});
  }
  struct Candidate {
    size_t failed;
    const Offer* offer;
    std::vector<std::string> failed_terms;
  };
  std::vector<Candidate> candidates;
  candidates.reserve(offers.size());
  for (const Offer& o : offers) {
    Candidate c{0, &o, {}};
    for (size_t i = 0; i < query.terms.size(); ++i) {
      if (!MatchesTerm(query.terms[i], o)) {
        ++e.per_term[i].eliminated;
        ++c.failed;
        c.failed_terms.push_back(names[i]);
      }
    }
    candidates.push_back(std::move(c));
  }
  size_t keep = std::min(nearest, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return std::tie(a.failed, a.offer->price_per_gpu_hour, a.offer->id) <
                             std::tie(b.failed, b.offer->price_per_gpu_hour, b.offer->id);
                    });
  for (size_t i = 0; i < keep; ++i) {
    e.nearest.push_back({*candidates[i].offer, std::move(candidates[i].failed_terms)});
  }
  return e;
}

Json ToJson(const Explanation& e) {
  Json terms = Json::array();
  for (const auto& t : e.per_term)
    terms.push_back({{"term", t.term}, {"eliminated", t.eliminated}});
  Json near = Json::array();
  for (const auto& n : e.nearest) {
    near.push_back({{"offer", ToJson(n.offer)}, {"fails", n.failed}});
  }
  return Json{{"offers_considered", e.offers}, {"terms", terms}, {"nearest", near}};
}

std::string Summary(const Explanation& e) {
  std::string s = "of " + std::to_string(e.offers) + " offer" + (e.offers == 1 ? "" : "s");
  for (const auto& t : e.per_term) {
    if (t.eliminated == 0) continue;
    s += ", `" + t.term + "` rules out " + std::to_string(t.eliminated);
  }
  if (!e.nearest.empty() && !e.nearest.front().failed.empty()) {
    const NearMiss& n = e.nearest.front();
    s += "; nearest: " + n.offer.id + " lacks ";
    for (size_t i = 0; i < n.failed.size(); ++i) s += (i ? ", " : "") + n.failed[i];
  }
  return s;
}

}  // namespace sluice::market
