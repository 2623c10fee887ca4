// The market service: nodes as users see them, live and catalog offers, catalog imports.
// Members of ServerCore.
#include <algorithm>
#include <map>
#include <string_view>

#include "common/inventory.h"
#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

std::vector<NodeView> ServerCore::ListNodes() {
  std::lock_guard<TimedMutex> lock(mu_);
  const auto& caps = CapacityLocked();
  std::map<std::string_view, const sched::NodeCapacity*> cap_of;
  for (const auto& c : caps) cap_of[c->node_id] = c.get();
  std::vector<NodeView> out;
  out.reserve(nodes_.size());
  for (const auto& [id, ns] : nodes_) {
    NodeView v;
    v.node = ns.record;
    v.reliability = ns.reliability;
    v.verifying = ns.awaiting_report;
    v.verify_queued = ns.verify_queued;
    if (ns.has_verdict) v.gpu_speeds = ns.verdict.gpu_speeds;
    if (auto c = cap_of.find(id); c != cap_of.end()) {
      for (const auto& g : c->second->gpus) v.gpus_free += g.free ? 1 : 0;
      v.cpus_free = c->second->free_cpus;
      v.memory_free_gb = c->second->free_memory_gb;
    }
    // A node out of the market may still run work.
    v.running_attempts = static_cast<int>(AttemptsOnLocked(id).size());
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<market::Offer> ServerCore::ListOffers() {
  std::lock_guard<TimedMutex> lock(mu_);
  std::vector<market::Offer> out = AgentOffersLocked();
  for (const auto& [provider, offers] : catalog_offers_) {
    out.insert(out.end(), offers.begin(), offers.end());
  }
  return out;
}

std::vector<market::Offer> ServerCore::AgentOffersLocked() const {
  std::vector<market::Offer> out;
  for (const auto& shared : CapacityLocked()) {
    const sched::NodeCapacity& cap = *shared;
    if (!cap.online) continue;  // offers from disconnected or lost nodes are withdrawn
    for (market::Offer o : cap.Offers()) {
      // As free right now.
      o.gpus_available = 0;
      for (const auto& g : cap.gpus) o.gpus_available += g.free && g.label == o.gpu_label;
      o.cpus = cap.free_cpus;
      o.memory_gb = cap.free_memory_gb;
      out.push_back(std::move(o));
    }
  }
  return out;
}

OfferPage ServerCore::SearchOffers(const market::Query& query,
                                   const std::vector<market::SortKey>& sort, size_t limit) {
  OfferPage page;
  // Catalog offers are answered by the index; only the few live agent offers are filtered here,
  // so a query never copies the whole catalog.
  std::vector<market::Offer> agent;
  std::vector<market::OfferRef> catalog;
  {
    std::lock_guard<TimedMutex> lock(mu_);
    for (auto& o : AgentOffersLocked()) {
      if (market::Matches(query, o)) agent.push_back(std::move(o));
    }
    catalog = catalog_index_.Search(query, sort, market::OfferIndex::kNoLimit);
  }
  page.matched = agent.size() + catalog.size();
  // Merge the two ordered lists (agent offers sorted here) up to `limit`.
  std::sort(agent.begin(), agent.end(), [&](const market::Offer& a, const market::Offer& b) {
    return market::OfferLess(sort, a, b);
  });
  size_t i = 0, j = 0;
  while (page.offers.size() < limit && (i < agent.size() || j < catalog.size())) {
    bool take_agent = j >= catalog.size() ||
                      (i < agent.size() && !market::OfferLess(sort, *catalog[j], agent[i]));
    page.offers.push_back(take_agent ? agent[i++] : *catalog[j++]);
  }
  if (page.matched == 0 && !query.terms.empty()) {
    page.explanation = market::Explain(query, ListOffers(), 3);
  }
  return page;
}

Result<market::CatalogImport> ServerCore::ImportCatalog(const std::string& source_name,
                                                        const std::string& csv) {
  SLUICE_ASSIGN_OR_RETURN(market::CatalogImport imported, market::ParseCatalog(csv, source_name));
  if (imported.offers.empty()) {
    return Status::InvalidArgument(source_name + ": no priced rows; nothing imported");
  }
  for (const auto& o : imported.offers) {
    if (o.provider != imported.provider) {
      return Status::InvalidArgument(source_name + ": rows from both `" + imported.provider +
                                     "` and `" + o.provider +
                                     "`; import one provider per file so a re-import replaces "
                                     "exactly that provider");
    }
  }
  std::lock_guard<TimedMutex> lock(mu_);
  WriteBatch batch;
  batch.catalogs.push_back({imported.provider, source_name, csv, clock_->NowMillis()});
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  for (const auto& old : catalog_offers_[imported.provider]) catalog_index_.Remove(old.id);
  catalog_index_.UpsertAll(imported.offers);
  catalog_offers_[imported.provider] = imported.offers;
  return imported;
}

}  // namespace sluice::server
