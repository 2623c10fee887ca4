// A placement search's memory between passes (docs/design-notes.md "Placement at scale",
// "Ranked shapes"): for a shape of job (ShapeKey), every node offer the shape could ever use, in
// the order of the job's estimate on it. The estimate of an idle offer does not depend on what
// the node has free, so the order holds while the offers do; a search for the shape's best
// candidate walks it from the best estimate and stops after the first estimate some node can
// take now, instead of scanning every node (a submit's own pass read all 10,000 nodes).
//
// Pure memoization: no I/O, and a pass given one places exactly as a pass without one (debug
// builds check every ranked search against a scan). Kept by the caller between passes; the
// offers are checked against the nodes by pointer once per pass (Sync), and a node whose offers
// changed is ranked again in every shape as the shape is next asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "market/offer.h"
#include "market/ranking.h"

namespace sluice::sched {

struct NodeCapacity;

class ShapeRankings {
 public:
  // An offer the shape could use, with what market::CompareEstimates reads of the job's
  // estimate on it (40 bytes; 120 with the whole estimate: a fleet's worth per shape is kept).
  struct Entry {
    uint32_t node = 0;   // position in the nodes given to Sync
    uint32_t offer = 0;  // index into that node's Offers()
    bool perf_known = true;
    double price_per_hour = 0;
    double expected_cost = 0;
    double expected_hours = 0;
    static Entry Of(size_t node, size_t offer, const market::CostEstimate& e);
    // An estimate with only the fields CompareEstimates reads: for ranking, not for a price.
    market::CostEstimate Ranked() const;
  };
  // The entries of node `node` for a shape: each of its offers the shape's job could ever use,
  // with its estimate, appended to `out`.
  using Usable = std::function<void(size_t node, std::vector<Entry>* out)>;

  // At most `max_entries` entries in all and `max_shapes` shapes (ranked or asked for once); the
  // least recently asked for go first. 2^20 entries is 40 MiB: 4 KiB per node of a 10,000-node
  // fleet, enough for bench/swarm's 225 shapes (~720,000 entries) without evictions.
  static constexpr size_t kDefaultMaxEntries = size_t{1} << 20;
  static constexpr size_t kDefaultMaxShapes = 4096;
  explicit ShapeRankings(size_t max_entries = kDefaultMaxEntries,
                         size_t max_shapes = kDefaultMaxShapes);

  // Brings the kept offers in line with `nodes`, the pass's nodes, and the model its estimates
  // are made with: once per pass, before Ranked. A node whose offers object is not the one kept
  // for its position is noted, and ranked again in each shape when the shape is next asked for;
  // a different model, node count, or too many changes since drops every ranking (the shapes
  // stay known, so each is ranked afresh on its next ask).
  void Sync(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes,
            const market::CostModel& model);

  // The shape's entries, best estimate first (market::CompareEstimates under `objective`, then
  // node position, then offer index). Null when the shape is not ranked: on its first ask (a
  // shape asked for once only is not worth ranking), when its entries would not fit, or when an
  // estimate is not a number (no order to keep). `usable` computes a node's entries. Never
  // changed once returned (a repair makes a new list), so a pass may hold several shapes' while
  // asking for more. With `rank` false, a shape not ranked yet stays so and the ask is not
  // counted: a search that reads few of a busy fleet's nodes (most skipped for want of room)
  // would pay more for the ranking than it saves.
  using Entries = std::shared_ptr<const std::vector<Entry>>;
  Entries Ranked(const std::string& key, market::Objective objective, const Usable& usable,
                 bool rank = true);

  size_t entries() const { return entries_; }
  size_t shapes() const { return shapes_.size(); }

 private:
  struct Shape {
    std::list<std::string>::iterator lru;
    bool unrankable = false;  // its estimates have no order, or it would not fit
    uint64_t synced = 0;      // the generation its entries are of
    Entries entries;          // null until ranked
    size_t size() const { return entries ? entries->size() : 0; }
  };
  void Clear();
  void Forget(std::unordered_map<std::string, Shape>::iterator it);
  void Rank(Shape& shape, market::Objective objective, const Usable& usable);
  void Repair(Shape& shape, market::Objective objective, const Usable& usable);
  void MakeRoom(const std::string& keep);

  size_t max_entries_;
  size_t max_shapes_;
  market::CostModel model_;
  // Each position's offers as last synced, held so a freed object's address cannot come back
  // as another node's and pass for it.
  std::vector<std::shared_ptr<const std::vector<market::Offer>>> offers_;
  uint64_t generation_ = 0;
  std::vector<std::pair<uint64_t, uint32_t>> changes_;  // (generation, position), in order
  std::unordered_map<std::string, Shape> shapes_;
  std::list<std::string> lru_;  // most recently asked for first
  size_t entries_ = 0;
};

}  // namespace sluice::sched
