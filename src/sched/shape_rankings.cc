#include "sched/shape_rankings.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "sched/scheduler.h"

namespace sluice::sched {

namespace {

// The fields CompareEstimates reads; one that is not a number compares "equal" to everything,
// which is no order to sort by.
bool Unordered(const ShapeRankings::Entry& e) {
  return std::isnan(e.price_per_hour) || std::isnan(e.expected_cost) ||
         std::isnan(e.expected_hours);
}

bool SameModel(const market::CostModel& a, const market::CostModel& b) {
  return a.storage_price_per_gb_month == b.storage_price_per_gb_month &&
         a.restart_hours == b.restart_hours &&
         a.prior_interruptions_per_hour == b.prior_interruptions_per_hour;
}

struct Before {
  market::Objective objective;
  bool operator()(const ShapeRankings::Entry& a, const ShapeRankings::Entry& b) const {
    if (int c = market::CompareRanked(objective, a, b)) return c < 0;
    return std::tie(a.node, a.offer) < std::tie(b.node, b.offer);
  }
};

// Appends the node's entries; false when one of them has no order.
bool Collect(const ShapeRankings::Usable& usable, size_t node,
             std::vector<ShapeRankings::Entry>* out) {
  const size_t had = out->size();
  usable(node, out);
  return std::none_of(out->begin() + static_cast<std::ptrdiff_t>(had), out->end(),
                      [](const ShapeRankings::Entry& e) { return Unordered(e); });
}

}  // namespace

ShapeRankings::Entry ShapeRankings::Entry::Of(size_t node, size_t offer,
                                              const market::CostEstimate& e) {
  Entry entry;
  entry.node = static_cast<uint32_t>(node);
  entry.offer = static_cast<uint32_t>(offer);
  entry.perf_known = e.perf_known;
  entry.price_per_hour = e.price_per_hour;
  entry.expected_cost = e.expected_cost;
  entry.expected_hours = e.expected_hours;
  return entry;
}

market::CostEstimate ShapeRankings::Entry::Ranked() const { return market::RankedEstimate(*this); }

ShapeRankings::ShapeRankings(size_t max_entries, size_t max_shapes)
    : max_entries_(max_entries), max_shapes_(std::max<size_t>(1, max_shapes)) {}

void ShapeRankings::Sync(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes,
                         const market::CostModel& model) {
  if (!SameModel(model, model_) || nodes.size() != offers_.size()) {
    // Every estimate, or every position, may be another now.
    Clear();
    model_ = model;
    offers_.clear();
    offers_.reserve(nodes.size());
    for (const auto& n : nodes) offers_.push_back(n->offers);
    return;
  }
  bool changed = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i]->offers == offers_[i]) continue;
    if (!changed) ++generation_;
    changed = true;
    offers_[i] = nodes[i]->offers;
    changes_.emplace_back(generation_, static_cast<uint32_t>(i));
  }
  // Past as many changes as a quarter of the nodes (a node changed twice counts twice), ranking a
  // shape afresh costs no more than repairing it.
  if (changes_.size() > std::max<size_t>(64, offers_.size() / 4)) Clear();
}

ShapeRankings::Entries ShapeRankings::Ranked(const std::string& key, market::Objective objective,
                                             const Usable& usable, bool rank) {
  auto it = shapes_.find(key);
  if (!rank && (it == shapes_.end() || !it->second.entries)) return nullptr;
  if (it == shapes_.end()) {
    lru_.push_front(key);
    Shape fresh;
    fresh.lru = lru_.begin();
    shapes_.emplace(key, std::move(fresh));
    MakeRoom(key);
    return nullptr;
  }
  Shape& shape = it->second;
  lru_.splice(lru_.begin(), lru_, shape.lru);
  if (shape.unrankable) return nullptr;
  if (shape.entries) {
    Repair(shape, objective, usable);
  } else {
    Rank(shape, objective, usable);
  }
  if (shape.unrankable) return nullptr;
  MakeRoom(key);
  return shape.entries;
}

void ShapeRankings::Rank(Shape& shape, market::Objective objective, const Usable& usable) {
  auto entries = std::make_shared<std::vector<Entry>>();
  for (size_t i = 0; i < offers_.size(); ++i) {
    if (!Collect(usable, i, entries.get()) || entries->size() > max_entries_) {
      shape.unrankable = true;
      return;
    }
  }
  std::sort(entries->begin(), entries->end(), Before{objective});
  entries_ += entries->size();
  shape.entries = std::move(entries);
  shape.synced = generation_;
}

void ShapeRankings::Repair(Shape& shape, market::Objective objective, const Usable& usable) {
  if (shape.synced == generation_) return;
  // The positions changed since the shape's generation, each once.
  auto from =
      std::upper_bound(changes_.begin(), changes_.end(), std::make_pair(shape.synced, UINT32_MAX));
  std::vector<char> changed(offers_.size(), 0);
  std::vector<uint32_t> positions;
  for (auto c = from; c != changes_.end(); ++c) {
    if (!changed[c->second]) positions.push_back(c->second);
    changed[c->second] = 1;
  }
  const size_t before = shape.size();
  entries_ -= before;
  std::vector<Entry> fresh;
  for (uint32_t p : positions) {
    if (!Collect(usable, p, &fresh)) {
      shape.entries = nullptr;
      shape.unrankable = true;
      return;
    }
  }
  const Before order{objective};
  std::sort(fresh.begin(), fresh.end(), order);
  // A new list: passes may still hold the old one.
  auto entries = std::make_shared<std::vector<Entry>>();
  entries->reserve(before + fresh.size());
  for (const Entry& e : *shape.entries) {
    if (changed[e.node] == 0) entries->push_back(e);
  }
  const auto middle = static_cast<std::ptrdiff_t>(entries->size());
  entries->insert(entries->end(), fresh.begin(), fresh.end());
  std::inplace_merge(entries->begin(), entries->begin() + middle, entries->end(), order);
  shape.synced = generation_;
  if (entries->size() > max_entries_) {
    shape.entries = nullptr;
    shape.unrankable = true;
    return;
  }
  entries_ += entries->size();
  shape.entries = std::move(entries);
}

void ShapeRankings::MakeRoom(const std::string& keep) {
  while ((entries_ > max_entries_ || shapes_.size() > max_shapes_) && !lru_.empty()) {
    if (lru_.back() == keep) return;  // the one asked for is the most recent: nothing older left
    Forget(shapes_.find(lru_.back()));
  }
}

void ShapeRankings::Forget(std::unordered_map<std::string, Shape>::iterator it) {
  entries_ -= it->second.size();
  lru_.erase(it->second.lru);
  shapes_.erase(it);
}

void ShapeRankings::Clear() {
  // The shapes stay known: asked for again, each is ranked afresh.
  for (auto& [key, shape] : shapes_) {
    shape.entries = nullptr;
    shape.unrankable = false;
  }
  entries_ = 0;
  changes_.clear();
}

}  // namespace sluice::sched
