#include "market/offer_index.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <queue>
#include <utility>

namespace sluice::market {
namespace {

constexpr double kNull = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The bucket order: OfferLess with this key is (price, id), unknown prices last.
const std::vector<SortKey>& PriceKeys() {
  static const std::vector<SortKey> keys = {SortKey{Field::kPrice, false}};
  return keys;
}

// The order of Bucket::by_spot.
const std::vector<SortKey>& SpotKeys() {
  static const std::vector<SortKey> keys = {SortKey{Field::kSpotPrice, false}};
  return keys;
}

int NumColOf(Field f) {
  switch (f) {
    case Field::kGpus:
      return OfferIndex::kNGpus;
    case Field::kVram:
      return OfferIndex::kNVram;
    case Field::kPrice:
      return OfferIndex::kNPrice;
    case Field::kSpotPrice:
      return OfferIndex::kNSpot;
    case Field::kCpus:
      return OfferIndex::kNCpus;
    case Field::kMemory:
      return OfferIndex::kNMemory;
    case Field::kDisk:
      return OfferIndex::kNDisk;
    case Field::kReliability:
      return OfferIndex::kNReliability;
    case Field::kHealth:
      return OfferIndex::kNHealth;
    case Field::kPerf:
      return OfferIndex::kNPerf;
    case Field::kVerified:
      return OfferIndex::kNVerified;
    case Field::kSource:
      return OfferIndex::kNSource;
    default:
      return -1;
  }
}

int DictColOf(Field f) {
  switch (f) {
    case Field::kModel:
      return OfferIndex::kDModel;
    case Field::kProvider:
      return OfferIndex::kDProvider;
    case Field::kRegion:
      return OfferIndex::kDRegion;
    case Field::kZone:
      return OfferIndex::kDZone;
    case Field::kForm:
      return OfferIndex::kDForm;
    case Field::kInterconnect:
      return OfferIndex::kDInterconnect;
    case Field::kCc:
      return OfferIndex::kDCc;
    case Field::kDriver:
      return OfferIndex::kDDriver;
    case Field::kCuda:
      return OfferIndex::kDCuda;
    case Field::kToolkit:
      return OfferIndex::kDToolkit;
    case Field::kTorch:
      return OfferIndex::kDTorch;
    default:
      return -1;
  }
}

// The same numbers the query language compares (query.cc NumberOf); the property test checks
// the two agree.
double NumValue(int col, const Offer& o) {
  switch (col) {
    case OfferIndex::kNGpus:
      return o.gpus_available;
    case OfferIndex::kNVram:
      return o.vram_gb;
    case OfferIndex::kNPrice:
      return o.price_per_gpu_hour;
    case OfferIndex::kNSpot:
      return o.interruptible_price_per_gpu_hour > 0 ? o.interruptible_price_per_gpu_hour : kNull;
    case OfferIndex::kNCpus:
      return o.cpus;
    case OfferIndex::kNMemory:
      return o.memory_gb;
    case OfferIndex::kNDisk:
      return o.disk_gb;
    case OfferIndex::kNReliability:
      return o.reliability;
    case OfferIndex::kNHealth:
      return o.health_score;
    case OfferIndex::kNPerf:
      return o.perf_score;
    case OfferIndex::kNVerified:
      return static_cast<int>(o.verified);
    case OfferIndex::kNSource:
      return static_cast<int>(o.source);
  }
  return kNull;
}

std::string* DictText(int col, Offer& o) {
  switch (col) {
    case OfferIndex::kDModel:
      return &o.gpu_model;
    case OfferIndex::kDProvider:
      return &o.provider;
    case OfferIndex::kDRegion:
      return &o.region;
    case OfferIndex::kDZone:
      return &o.zone;
    case OfferIndex::kDForm:
      return &o.form_factor;
    case OfferIndex::kDInterconnect:
      return &o.interconnect;
    case OfferIndex::kDCc:
      return &o.compute_capability;
    case OfferIndex::kDDriver:
      return &o.driver_version;
    case OfferIndex::kDCuda:
      return &o.cuda_version;
  }
  return nullptr;
}

std::vector<std::string>* DictList(int col, Offer& o) {
  return col == OfferIndex::kDToolkit ? &o.toolkits
         : col == OfferIndex::kDTorch ? &o.torch_builds
                                      : nullptr;
}

// Length-prefixed so that no two different lists share a key.
std::string ListKey(const std::vector<std::string>& list) {
  std::string key;
  for (const std::string& s : list) {
    key += std::to_string(s.size());
    key += ':';
    key += s;
  }
  return key;
}

// MatchesTerm for a number term, on a column value (query.cc's rule: unknown satisfies nothing).
bool NumHolds(const Term& t, double x) {
  if (std::isnan(x)) return false;
  if (t.op == Op::kIn || t.op == Op::kNotIn) {
    const bool any = std::find(t.numbers.begin(), t.numbers.end(), x) != t.numbers.end();
    return any != (t.op == Op::kNotIn);
  }
  const double v = t.numbers.empty() ? 0 : t.numbers[0];
  switch (t.op) {
    case Op::kEq:
      return x == v;
    case Op::kNe:
      return x != v;
    case Op::kLt:
      return x < v;
    case Op::kLe:
      return x <= v;
    case Op::kGt:
      return x > v;
    case Op::kGe:
      return x >= v;
    default:
      return false;
  }
}

// A sort key's column value mapped so that smaller ranks first; unknown ranks last in either
// direction, as in OfferLess. +inf is ambiguous (unknown, or a real infinity) and so decides
// nothing on a tie.
double RankValue(double x, bool descending) {
  if (std::isnan(x)) return kInf;
  return descending ? -x : x;
}

// Whether some value in [lo, hi] (the known values of a bucket's column) can satisfy the term.
// lo > hi means the column holds no known value, and unknown satisfies nothing.
bool ZonePossible(const Term& t, double lo, double hi) {
  if (lo > hi) return false;
  if (t.numbers.empty()) return true;
  const double v = t.numbers[0];
  switch (t.op) {
    case Op::kLt:
      return lo < v;
    case Op::kLe:
      return lo <= v;
    case Op::kGt:
      return hi > v;
    case Op::kGe:
      return hi >= v;
    case Op::kEq:
      return lo <= v && v <= hi;
    default:
      return true;
  }
}

}  // namespace

uint32_t OfferIndex::CodeFor(int col, const Offer& o) {
  Dict& d = dicts_[col];
  Offer& any = const_cast<Offer&>(o);  // read only: DictText/DictList share one accessor
  const std::string* text = DictText(col, any);
  const std::string key = text ? *text : ListKey(*DictList(col, any));
  auto [it, inserted] = d.code_of.emplace(key, static_cast<uint32_t>(d.code_of.size()));
  if (inserted) {
    if (text) {
      d.text.push_back(*text);
      d.lists.emplace_back();
    } else {
      d.text.emplace_back();
      d.lists.push_back(*DictList(col, any));
    }
  }
  return it->second;
}

void OfferIndex::AppendRow(Bucket& b, uint32_t slot, const Offer& o) {
  b.slots.push_back(slot);
  for (int c = 0; c < kNumCols; ++c) {
    const double x = NumValue(c, o);
    b.num[c].push_back(x);
    if (std::isnan(x)) {
      b.has_unknown[c] = true;
    } else {
      b.min[c] = std::min(b.min[c], x);
      b.max[c] = std::max(b.max[c], x);
    }
  }
  for (int c = 0; c < kDictCols; ++c) b.code[c].push_back(CodeFor(c, o));
}

uint32_t OfferIndex::Store(Offer offer) {
  auto ref = std::make_shared<const Offer>(std::move(offer));
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    offers_[slot] = std::move(ref);
  } else {
    slot = static_cast<uint32_t>(offers_.size());
    offers_.push_back(std::move(ref));
  }
  slot_of_id_[offers_[slot]->id] = slot;
  return slot;
}

void OfferIndex::Release(uint32_t slot) {
  slot_of_id_.erase(offers_[slot]->id);
  offers_[slot].reset();
  free_slots_.push_back(slot);
}

OfferIndex::Bucket& OfferIndex::BucketFor(const std::string& label) {
  auto [it, inserted] = bucket_of_label_.emplace(label, buckets_.size());
  if (inserted) {
    buckets_.emplace_back();
    Bucket& b = buckets_.back();
    b.label = label;
    b.min.fill(kInf);
    b.max.fill(-kInf);
    b.has_unknown.fill(false);
    std::string lower = label;
    for (char& c : lower) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    buckets_of_lower_label_[lower].push_back(it->second);
  }
  return buckets_[it->second];
}

void OfferIndex::InsertSorted(Bucket& b, uint32_t slot) {
  const Offer& o = *offers_[slot];
  auto it = std::partition_point(b.slots.begin(), b.slots.end(), [&](uint32_t s) {
    return OfferLess(PriceKeys(), *offers_[s], o);
  });
  const auto pos = static_cast<uint32_t>(it - b.slots.begin());
  b.slots.insert(it, slot);
  for (int c = 0; c < kNumCols; ++c) {
    const double x = NumValue(c, o);
    b.num[c].insert(b.num[c].begin() + pos, x);
    if (std::isnan(x)) {
      b.has_unknown[c] = true;
    } else {
      b.min[c] = std::min(b.min[c], x);
      b.max[c] = std::max(b.max[c], x);
    }
  }
  for (int c = 0; c < kDictCols; ++c) b.code[c].insert(b.code[c].begin() + pos, CodeFor(c, o));
  for (uint32_t& p : b.by_spot) p += p >= pos ? 1 : 0;
  auto sit = std::partition_point(b.by_spot.begin(), b.by_spot.end(), [&](uint32_t p) {
    return OfferLess(SpotKeys(), *offers_[b.slots[p]], o);
  });
  b.by_spot.insert(sit, pos);
}

// Takes the slot's row out of its bucket; the slot itself stays allocated.
void OfferIndex::EraseFromBucket(uint32_t slot) {
  const Offer& o = *offers_[slot];
  Bucket& b = buckets_[bucket_of_label_.at(o.gpu_label)];
  auto it = std::partition_point(b.slots.begin(), b.slots.end(), [&](uint32_t s) {
    return OfferLess(PriceKeys(), *offers_[s], o);
  });
  // (price, id) is unique, so the row is exactly here; a linear search guards the invariant.
  if (it == b.slots.end() || *it != slot) it = std::find(b.slots.begin(), b.slots.end(), slot);
  if (it == b.slots.end()) return;
  const auto pos = static_cast<uint32_t>(it - b.slots.begin());
  b.slots.erase(it);
  for (auto& col : b.num) col.erase(col.begin() + pos);
  for (auto& col : b.code) col.erase(col.begin() + pos);
  b.by_spot.erase(std::find(b.by_spot.begin(), b.by_spot.end(), pos));
  for (uint32_t& p : b.by_spot) p -= p > pos ? 1 : 0;
}

void OfferIndex::RebuildBucket(Bucket& b) {
  std::vector<uint32_t> slots = std::move(b.slots);
  std::sort(slots.begin(), slots.end(), [&](uint32_t x, uint32_t y) {
    return OfferLess(PriceKeys(), *offers_[x], *offers_[y]);
  });
  b.slots.clear();
  for (auto& col : b.num) col.clear();
  for (auto& col : b.code) col.clear();
  b.min.fill(kInf);
  b.max.fill(-kInf);
  b.has_unknown.fill(false);
  for (uint32_t s : slots) AppendRow(b, s, *offers_[s]);
  b.by_spot.resize(b.slots.size());
  for (uint32_t i = 0; i < b.by_spot.size(); ++i) b.by_spot[i] = i;
  std::sort(b.by_spot.begin(), b.by_spot.end(), [&](uint32_t x, uint32_t y) {
    return OfferLess(SpotKeys(), *offers_[b.slots[x]], *offers_[b.slots[y]]);
  });
}

void OfferIndex::Upsert(Offer offer) {
  std::unique_lock lock(mu_);
  if (auto it = slot_of_id_.find(offer.id); it != slot_of_id_.end()) {
    const uint32_t slot = it->second;
    EraseFromBucket(slot);
    Release(slot);
  }
  const uint32_t slot = Store(std::move(offer));
  InsertSorted(BucketFor(offers_[slot]->gpu_label), slot);
}

void OfferIndex::UpsertAll(std::vector<Offer> offers) {
  std::unique_lock lock(mu_);
  std::vector<bool> touched(buckets_.size(), false);
  for (Offer& offer : offers) {
    if (auto it = slot_of_id_.find(offer.id); it != slot_of_id_.end()) {
      const uint32_t slot = it->second;
      const size_t old_bucket = bucket_of_label_.at(offers_[slot]->gpu_label);
      // Touched buckets are rebuilt from their slot lists below; only those must be right.
      if (old_bucket < touched.size() && touched[old_bucket]) {
        auto& s = buckets_[old_bucket].slots;
        s.erase(std::find(s.begin(), s.end(), slot));
      } else {
        EraseFromBucket(slot);
      }
      Release(slot);
    }
    const uint32_t slot = Store(std::move(offer));
    Bucket& b = BucketFor(offers_[slot]->gpu_label);
    const size_t bi = bucket_of_label_.at(b.label);
    if (bi >= touched.size()) touched.resize(bi + 1, false);
    touched[bi] = true;
    b.slots.push_back(slot);
  }
  for (size_t i = 0; i < touched.size(); ++i) {
    if (touched[i]) RebuildBucket(buckets_[i]);
  }
}

bool OfferIndex::Remove(std::string_view id) {
  std::unique_lock lock(mu_);
  auto it = slot_of_id_.find(std::string(id));
  if (it == slot_of_id_.end()) return false;
  const uint32_t slot = it->second;
  EraseFromBucket(slot);
  Release(slot);
  return true;
}

size_t OfferIndex::size() const {
  std::shared_lock lock(mu_);
  return slot_of_id_.size();
}

std::vector<OfferRef> OfferIndex::Search(const Query& query, const std::vector<SortKey>& keys,
                                         size_t limit) const {
  std::shared_lock lock(mu_);
  if (limit == 0) return {};

  // Compile the terms into the cheapest check each allows. `gpu` terms depend on the label only
  // and are decided per bucket; the rest are checked per row, numbers first.
  struct NumCheck {
    int col;
    const Term* term;
  };
  struct DictCheck {
    int col;
    const Term* term;
    mutable std::vector<int8_t> verdict;  // per code: -1 not yet computed, 0/1
    mutable Offer probe;                  // an offer holding only this field's value
  };
  std::vector<const Term*> gpu_terms;
  std::vector<NumCheck> num_checks;
  std::vector<DictCheck> dict_checks;
  std::vector<const Term*> row_terms;  // node, id: evaluated on the Offer itself
  for (const Term& t : query.terms) {
    if (t.field == Field::kGpu) {
      gpu_terms.push_back(&t);
    } else if (int c = NumColOf(t.field); c >= 0) {
      num_checks.push_back({c, &t});
    } else if (int d = DictColOf(t.field); d >= 0) {
      dict_checks.push_back({d, &t, std::vector<int8_t>(dicts_[d].text.size(), -1), Offer{}});
    } else {
      row_terms.push_back(&t);
    }
  }

  // Which buckets to look at: a plain `gpu=`/`gpu in` names them; otherwise all of them. Either
  // way every gpu term is then checked on the bucket's label.
  std::vector<size_t> bucket_ids;
  const Term* named = nullptr;
  for (const Term* t : gpu_terms) {
    if ((t->op == Op::kEq || t->op == Op::kIn) && !t->glob) named = t;
  }
  if (named != nullptr) {
    for (const std::string& l : named->labels) {
      if (auto it = buckets_of_lower_label_.find(l); it != buckets_of_lower_label_.end()) {
        bucket_ids.insert(bucket_ids.end(), it->second.begin(), it->second.end());
      }
    }
  } else {
    bucket_ids.resize(buckets_.size());
    for (size_t i = 0; i < bucket_ids.size(); ++i) bucket_ids[i] = i;
  }

  // The leading sort keys that are number columns are compared on the columns (up to three).
  constexpr int kMaxRanks = 3;
  struct RankCol {
    int col;
    bool desc;
  };
  std::vector<RankCol> rank_cols;
  for (const SortKey& k : keys) {
    const int c = NumColOf(k.field);
    if (c < 0 || rank_cols.size() == kMaxRanks) break;
    rank_cols.push_back({c, k.descending});
  }
  const int nr = static_cast<int>(rank_cols.size());

  struct Cand {
    std::array<double, kMaxRanks> r;
    uint32_t slot;
  };
  // <0 / >0 when the first `n` columns decide the order, 0 when they do not.
  auto rank_cmp_n = [](const Cand& a, const Cand& b, int n) {
    for (int k = 0; k < n; ++k) {
      if (a.r[k] != b.r[k]) return a.r[k] < b.r[k] ? -1 : 1;
      if (a.r[k] == kInf) return 0;
    }
    return 0;
  };
  auto rank_cmp = [&](const Cand& a, const Cand& b) { return rank_cmp_n(a, b, nr); };
  // "a ranks before b"; as a priority_queue's less-than it keeps the worst candidate on top.
  auto better = [&](const Cand& a, const Cand& b) {
    const int c = rank_cmp(a, b);
    if (c != 0) return c < 0;
    return OfferLess(keys, *offers_[a.slot], *offers_[b.slot]);
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(better)> heap(better);

  // A row range of the bucket's visiting order that holds every row a bound on the ordering
  // column (price, or spot in spot order) allows; the row checks still apply every term.
  auto range_of = [&](const Bucket& b, int col, const uint32_t* perm) {
    const std::vector<double>& v = b.num[col];
    const size_t n = b.slots.size();
    auto value = [&](size_t i) { return v[perm ? perm[i] : i]; };
    auto count_while = [&](auto pred) {
      size_t lo = 0, hi = n;  // NaN sits at the end and fails both predicates below
      while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (pred(value(mid))) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      return lo;
    };
    size_t lo = 0, hi = n;
    for (const NumCheck& nc : num_checks) {
      if (nc.col != col || nc.term->numbers.empty()) continue;
      const double x = nc.term->numbers[0];
      const Op op = nc.term->op;
      if (op == Op::kLt || op == Op::kGe || op == Op::kEq) {
        const size_t below = count_while([x](double y) { return y < x; });
        if (op == Op::kLt) hi = std::min(hi, below);
        if (op != Op::kLt) lo = std::max(lo, below);
      }
      if (op == Op::kLe || op == Op::kGt || op == Op::kEq) {
        const size_t at_most = count_while([x](double y) { return y <= x; });
        if (op == Op::kGt) lo = std::max(lo, at_most);
        if (op != Op::kGt) hi = std::min(hi, at_most);
      }
    }
    return std::pair<size_t, size_t>{lo, std::max(lo, hi)};
  };

  // With price or spot ascending first, visiting the buckets cheapest first lets the loop stop
  // at the first bucket whose cheapest row already ranks behind the current top-k.
  const bool global_order =
      nr > 0 && (rank_cols[0].col == kNPrice || rank_cols[0].col == kNSpot) && !rank_cols[0].desc;
  if (global_order && limit != kNoLimit) {
    const int col = rank_cols[0].col;
    std::sort(bucket_ids.begin(), bucket_ids.end(),
              [&](size_t x, size_t y) { return buckets_[x].min[col] < buckets_[y].min[col]; });
  }

  Offer label_probe;
  for (size_t bi : bucket_ids) {
    const Bucket& b = buckets_[bi];
    if (b.slots.empty()) continue;
    if (global_order && heap.size() >= limit &&
        RankValue(b.min[rank_cols[0].col], false) > heap.top().r[0]) {
      // min ignores unknown values, which rank last anyway.
      if (limit != kNoLimit) break;
      continue;
    }
    label_probe.gpu_label = b.label;
    bool possible = true;
    for (const Term* t : gpu_terms) {
      if (!MatchesTerm(*t, label_probe)) {
        possible = false;
        break;
      }
    }
    for (const NumCheck& nc : num_checks) {
      if (!possible) break;
      possible = ZonePossible(*nc.term, b.min[nc.col], b.max[nc.col]);
    }
    if (!possible) continue;

    // Sort keys whose column is one known value throughout this bucket rank all its rows
    // alike; if the next key is price or spot ascending, the rows can be visited in rank order
    // (`gpu=h100 -o -perf,price`: perf is the same for every h100).
    int lead = 0;
    while (lead < nr && !b.has_unknown[rank_cols[lead].col] &&
           b.min[rank_cols[lead].col] == b.max[rank_cols[lead].col]) {
      ++lead;
    }
    const bool ordered = lead < nr && !rank_cols[lead].desc &&
                         (rank_cols[lead].col == kNPrice || rank_cols[lead].col == kNSpot);
    const bool spot_order = ordered && rank_cols[lead].col == kNSpot;
    const uint32_t* perm = spot_order ? b.by_spot.data() : nullptr;
    auto [lo, hi] = range_of(b, spot_order ? kNSpot : kNPrice, perm);
    for (size_t i = lo; i < hi; ++i) {
      const size_t row = perm ? perm[i] : i;
      Cand c;
      for (int k = 0; k < nr; ++k) {
        c.r[k] = RankValue(b.num[rank_cols[k].col][row], rank_cols[k].desc);
      }
      if (heap.size() >= limit) {
        const Cand& top = heap.top();
        // Visited in rank order of keys 0..lead: once those rank this row behind the top-k, every
        // later row of the bucket ranks behind it too.
        if (ordered && rank_cmp_n(c, top, lead + 1) > 0) break;
        if (rank_cmp(c, top) > 0) continue;
      }
      bool ok = true;
      for (const NumCheck& nc : num_checks) {
        if (!NumHolds(*nc.term, b.num[nc.col][row])) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      for (const DictCheck& dc : dict_checks) {
        const uint32_t code = b.code[dc.col][row];
        if (code >= dc.verdict.size()) dc.verdict.resize(code + 1, -1);
        int8_t& v = dc.verdict[code];
        if (v < 0) {
          const Dict& d = dicts_[dc.col];
          if (std::string* text = DictText(dc.col, dc.probe)) {
            *text = d.text[code];
          } else {
            *DictList(dc.col, dc.probe) = d.lists[code];
          }
          v = MatchesTerm(*dc.term, dc.probe) ? 1 : 0;
        }
        if (v == 0) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      c.slot = b.slots[row];
      for (const Term* t : row_terms) {
        if (!MatchesTerm(*t, *offers_[c.slot])) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      if (heap.size() < limit) {
        heap.push(c);
      } else if (better(c, heap.top())) {
        heap.pop();
        heap.push(c);
      }
    }
  }

  std::vector<OfferRef> out(heap.size());
  for (size_t i = out.size(); i-- > 0;) {  // the heap pops worst first
    out[i] = offers_[heap.top().slot];
    heap.pop();
  }
  return out;
}

}  // namespace sluice::market
