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

// A first sort key's column value mapped so that smaller ranks first; unknown ranks last in
// either direction, as in OfferLess. Equal values fall back to the full comparison.
double RankValue(double x, bool descending) {
  if (std::isnan(x)) return kInf;
  return descending ? -x : x;
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
  for (int c = 0; c < kNumCols; ++c) b.num[c].push_back(NumValue(c, o));
  for (int c = 0; c < kDictCols; ++c) b.code[c].push_back(CodeFor(c, o));
}

uint32_t OfferIndex::Store(Offer offer) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    offers_[slot] = std::move(offer);
  } else {
    slot = static_cast<uint32_t>(offers_.size());
    offers_.push_back(std::move(offer));
  }
  slot_of_id_[offers_[slot].id] = slot;
  return slot;
}

void OfferIndex::InsertSorted(Bucket& b, uint32_t slot) {
  const Offer& o = offers_[slot];
  auto it = std::partition_point(b.slots.begin(), b.slots.end(),
                                 [&](uint32_t s) { return OfferLess(PriceKeys(), offers_[s], o); });
  const size_t pos = static_cast<size_t>(it - b.slots.begin());
  b.slots.insert(it, slot);
  for (int c = 0; c < kNumCols; ++c) b.num[c].insert(b.num[c].begin() + pos, NumValue(c, o));
  for (int c = 0; c < kDictCols; ++c) b.code[c].insert(b.code[c].begin() + pos, CodeFor(c, o));
}

// Takes the slot's row out of its bucket; the slot itself stays allocated.
void OfferIndex::EraseFromBucket(uint32_t slot) {
  const Offer& o = offers_[slot];
  Bucket& b = buckets_[bucket_of_label_.at(o.gpu_label)];
  auto it = std::partition_point(b.slots.begin(), b.slots.end(),
                                 [&](uint32_t s) { return OfferLess(PriceKeys(), offers_[s], o); });
  // (price, id) is unique, so the row is exactly here; a linear search guards the invariant.
  if (it == b.slots.end() || *it != slot) it = std::find(b.slots.begin(), b.slots.end(), slot);
  if (it == b.slots.end()) return;
  const size_t pos = static_cast<size_t>(it - b.slots.begin());
  b.slots.erase(it);
  for (auto& col : b.num) col.erase(col.begin() + pos);
  for (auto& col : b.code) col.erase(col.begin() + pos);
}

void OfferIndex::RebuildBucket(Bucket& b) {
  std::vector<uint32_t> slots = std::move(b.slots);
  std::sort(slots.begin(), slots.end(),
            [&](uint32_t x, uint32_t y) { return OfferLess(PriceKeys(), offers_[x], offers_[y]); });
  b.slots.clear();
  for (auto& col : b.num) col.clear();
  for (auto& col : b.code) col.clear();
  for (uint32_t s : slots) AppendRow(b, s, offers_[s]);
}

void OfferIndex::Upsert(Offer offer) {
  std::unique_lock lock(mu_);
  if (auto it = slot_of_id_.find(offer.id); it != slot_of_id_.end()) {
    const uint32_t slot = it->second;
    EraseFromBucket(slot);
    slot_of_id_.erase(it);
    offers_[slot] = Offer{};
    free_slots_.push_back(slot);
  }
  const uint32_t slot = Store(std::move(offer));
  const std::string& label = offers_[slot].gpu_label;
  auto [bit, inserted] = bucket_of_label_.emplace(label, buckets_.size());
  if (inserted) {
    buckets_.emplace_back();
    buckets_.back().label = label;
  }
  InsertSorted(buckets_[bit->second], slot);
}

void OfferIndex::UpsertAll(std::vector<Offer> offers) {
  std::unique_lock lock(mu_);
  std::vector<bool> touched(buckets_.size(), false);
  for (Offer& offer : offers) {
    if (auto it = slot_of_id_.find(offer.id); it != slot_of_id_.end()) {
      const uint32_t slot = it->second;
      const size_t old_bucket = bucket_of_label_.at(offers_[slot].gpu_label);
      // Touched buckets are re-sorted below anyway; only their slot lists must be right.
      if (old_bucket < touched.size() && touched[old_bucket]) {
        auto& s = buckets_[old_bucket].slots;
        s.erase(std::find(s.begin(), s.end(), slot));
      } else {
        EraseFromBucket(slot);
      }
      slot_of_id_.erase(it);
      offers_[slot] = Offer{};
      free_slots_.push_back(slot);
    }
    const uint32_t slot = Store(std::move(offer));
    const std::string& label = offers_[slot].gpu_label;
    auto [bit, inserted] = bucket_of_label_.emplace(label, buckets_.size());
    if (inserted) {
      buckets_.emplace_back();
      buckets_.back().label = label;
    }
    if (bit->second >= touched.size()) touched.resize(bit->second + 1, false);
    touched[bit->second] = true;
    buckets_[bit->second].slots.push_back(slot);
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
  slot_of_id_.erase(it);
  offers_[slot] = Offer{};
  free_slots_.push_back(slot);
  return true;
}

size_t OfferIndex::size() const {
  std::shared_lock lock(mu_);
  return slot_of_id_.size();
}

std::vector<Offer> OfferIndex::Search(const Query& query, const std::vector<SortKey>& keys,
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

  // The bucket order makes price terms into a row range.
  auto price_range = [&](const Bucket& b) {
    const std::vector<double>& p = b.num[kNPrice];
    size_t lo = 0, hi = p.size();
    for (const NumCheck& nc : num_checks) {
      if (nc.col != kNPrice || nc.term->numbers.empty()) continue;
      const double v = nc.term->numbers[0];
      // NaN prices sit at the end and fail both predicates, so these stay partitions.
      auto below = [&](double x) { return x < v; };
      auto at_most = [&](double x) { return x <= v; };
      const size_t n_below = std::partition_point(p.begin(), p.end(), below) - p.begin();
      const size_t n_at_most = std::partition_point(p.begin(), p.end(), at_most) - p.begin();
      switch (nc.term->op) {
        case Op::kLt:
          hi = std::min(hi, n_below);
          break;
        case Op::kLe:
          hi = std::min(hi, n_at_most);
          break;
        case Op::kGt:
          lo = std::max(lo, n_at_most);
          break;
        case Op::kGe:
          lo = std::max(lo, n_below);
          break;
        case Op::kEq:
          lo = std::max(lo, n_below);
          hi = std::min(hi, n_at_most);
          break;
        default:
          break;
      }
    }
    return std::pair<size_t, size_t>{lo, std::max(lo, hi)};
  };

  const int rank_col = keys.empty() ? -1 : NumColOf(keys[0].field);
  const bool rank_desc = !keys.empty() && keys[0].descending;
  // Rows of a bucket come in rank order when the ranking starts with price ascending.
  const bool bucket_ordered = rank_col == kNPrice && !rank_desc;

  struct Cand {
    double rank;
    uint32_t slot;
  };
  // "a ranks before b"; as a priority_queue's less-than it keeps the worst candidate on top.
  auto better = [&](const Cand& a, const Cand& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    return OfferLess(keys, offers_[a.slot], offers_[b.slot]);
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(better)> heap(better);

  Offer label_probe;
  for (const Bucket& b : buckets_) {
    if (b.slots.empty()) continue;
    label_probe.gpu_label = b.label;
    bool label_ok = true;
    for (const Term* t : gpu_terms) {
      if (!MatchesTerm(*t, label_probe)) {
        label_ok = false;
        break;
      }
    }
    if (!label_ok) continue;

    auto [lo, hi] = price_range(b);
    const double* rank_values = rank_col >= 0 ? b.num[rank_col].data() : nullptr;
    for (size_t i = lo; i < hi; ++i) {
      const double rank = rank_values ? RankValue(rank_values[i], rank_desc) : 0;
      if (heap.size() >= limit && rank > heap.top().rank) {
        if (bucket_ordered) break;  // every later row of this bucket ranks later still
        continue;
      }
      bool ok = true;
      for (const NumCheck& nc : num_checks) {
        if (!NumHolds(*nc.term, b.num[nc.col][i])) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      for (const DictCheck& dc : dict_checks) {
        const uint32_t code = b.code[dc.col][i];
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
      const Offer& o = offers_[b.slots[i]];
      for (const Term* t : row_terms) {
        if (!MatchesTerm(*t, o)) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      const Cand c{rank, b.slots[i]};
      if (heap.size() < limit) {
        heap.push(c);
      } else if (better(c, heap.top())) {
        heap.pop();
        heap.push(c);
      }
    }
  }

  std::vector<Cand> picked;
  picked.reserve(heap.size());
  while (!heap.empty()) {
    picked.push_back(heap.top());
    heap.pop();
  }
  std::reverse(picked.begin(), picked.end());  // popped worst first
  std::vector<Offer> out;
  out.reserve(picked.size());
  for (const Cand& c : picked) out.push_back(offers_[c.slot]);
  return out;
}

}  // namespace sluice::market
