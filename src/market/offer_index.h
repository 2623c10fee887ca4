// OfferIndex: the in-memory market index (issue 3 item 7, DESIGN.md §8). The store is the source
// of truth; the server loads every offer at start (UpsertAll) and applies changes as they come
// (Upsert / Remove). Search answers `sluice offers` without touching the store.
//
// Contract: Search(q, keys, limit) returns exactly what a brute-force pass would — every offer
// with Matches(q, offer), sorted by OfferLess(keys), the first `limit` of them. The property test
// (offer_index_test.cc) holds the index to that.
//
// Layout, and why:
//   - Offers are bucketed by gpu_label: nearly every query names a GPU, so the `gpu` terms are
//     decided once per bucket instead of once per offer.
//   - Inside a bucket offers are kept in (price, id) order, so a `price<X` bound is a binary
//     search and the default ranking (cheapest first) with a small limit stops early.
//   - Each bucket holds its fields as columns (struct of arrays) in that same order: numbers as
//     doubles (NaN = unknown), low-cardinality strings and version lists as dictionary codes whose
//     verdict is computed once per distinct value per search. A scan then reads a few contiguous
//     arrays instead of chasing ~600-byte Offer structs.
//   - Each bucket also keeps its rows in spot-price order (a permutation), because "cheapest
//     interruptible" is the other common ranking and SQLite answers it from an index.
//   - Per bucket min/max of every number column lets a term like `vram>=80` skip whole buckets.
//   - Top-k uses a bounded heap; the leading numeric sort keys are compared on the columns first,
//     so most rejected offers cost a comparison or two, not an OfferLess call.
//
// Thread safety: all methods may be called concurrently; Search takes a shared lock, the
// mutators an exclusive one. Offers are immutable once stored and Search hands out shared
// references to them, so results stay valid (and unchanged) after later updates.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "market/offer.h"
#include "market/query.h"

namespace sluice::market {

using OfferRef = std::shared_ptr<const Offer>;

class OfferIndex {
 public:
  // Pass as `limit` for every match.
  static constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();

  OfferIndex() = default;
  OfferIndex(const OfferIndex&) = delete;
  OfferIndex& operator=(const OfferIndex&) = delete;

  // Inserts the offer, or replaces the one with the same id. O(bucket size) for the column
  // shifts; use UpsertAll for a bulk load.
  void Upsert(Offer offer);
  // Upsert for many offers at once: appends, then re-sorts each touched bucket once. Later
  // entries win over earlier ones with the same id.
  void UpsertAll(std::vector<Offer> offers);
  // Removes the offer with this id; false when there is none.
  bool Remove(std::string_view id);
  size_t size() const;

  // The first `limit` matches in OfferLess(keys) order (limit 0 → none).
  std::vector<OfferRef> Search(const Query& query, const std::vector<SortKey>& keys,
                               size_t limit) const;

  // Number columns (doubles, NaN = unknown, as the query language defines unknown) and
  // dictionary-coded columns. Public only so the .cc's helpers can name them.
  enum NumCol {
    kNGpus,
    kNVram,
    kNPrice,
    kNSpot,
    kNCpus,
    kNMemory,
    kNDisk,
    kNReliability,
    kNHealth,
    kNPerf,
    kNVerified,
    kNSource,
    kNumCols
  };
  enum DictCol {
    kDModel,
    kDProvider,
    kDRegion,
    kDZone,
    kDForm,
    kDInterconnect,
    kDCc,
    kDDriver,
    kDCuda,
    kDToolkit,
    kDTorch,
    kDictCols
  };

  // One gpu_label's offers in (price, id) order, columns parallel to `slots`.
  struct Bucket {
    std::string label;
    std::vector<uint32_t> slots;  // into offers_
    std::array<std::vector<double>, kNumCols> num;
    std::array<std::vector<uint32_t>, kDictCols> code;
    std::vector<uint32_t> by_spot;  // row positions in (spot price, id) order, unknown last
    // Bounds of the known (non-NaN) values per number column. Erasing does not shrink them:
    // they only have to contain every value, not be tight.
    std::array<double, kNumCols> min, max;
    std::array<bool, kNumCols> has_unknown;  // some row holds NaN (also not cleared on erase)
  };

  // Distinct values of one dictionary column; codes are never reused or dropped, so the set only
  // grows with new distinct values (a handful per field in practice).
  struct Dict {
    std::unordered_map<std::string, uint32_t> code_of;
    std::vector<std::string> text;                // string fields
    std::vector<std::vector<std::string>> lists;  // toolkit / torch
  };

 private:
  uint32_t CodeFor(int col, const Offer& o);
  void AppendRow(Bucket& b, uint32_t slot, const Offer& o);
  void InsertSorted(Bucket& b, uint32_t slot);
  void EraseFromBucket(uint32_t slot);
  void RebuildBucket(Bucket& b);
  uint32_t Store(Offer offer);
  void Release(uint32_t slot);
  Bucket& BucketFor(const std::string& label);

  mutable std::shared_mutex mu_;
  // Guarded by mu_.
  std::vector<OfferRef> offers_;  // by slot; freed slots are reused
  std::vector<uint32_t> free_slots_;
  std::unordered_map<std::string, uint32_t> slot_of_id_;
  std::unordered_map<std::string, size_t> bucket_of_label_;  // into buckets_
  std::vector<Bucket> buckets_;
  // Lowercased label → buckets, for `gpu=`/`gpu in` terms (labels compare case-insensitively).
  std::unordered_map<std::string, std::vector<size_t>> buckets_of_lower_label_;
  std::array<Dict, kDictCols> dicts_;
};

}  // namespace sluice::market
