// Cloud price catalogs: CSV files in the SkyPilot catalog layout (data/catalog/<cloud>.csv)
// turned into Offers with source kCatalog, so cloud prices are listed and compared next to
// agent nodes (issue 3 item 3). Catalog offers are never launchable.
//
// Columns: cloud, instance_type, accelerator_name, accelerator_count, gpu_memory_gib, vcpus,
// memory_gib, price, spot_price, region, zone. Prices are USD per hour for the whole instance;
// offers carry them per GPU-hour. An import is all or nothing: one malformed row fails it with
// `<file>:<line>: <column>: <what>`, because a partial import would silently replace a
// provider's offers with a subset.
//
// Thread safety: all functions are pure and safe to call concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "market/offer.h"

namespace sluice::market {

// One CSV record: its fields and the 1-based line where it starts (line 1 is the header).
struct CsvRecord {
  int line = 0;
  std::vector<std::string> fields;
};

// RFC 4180 CSV: commas separate, double quotes group (commas and newlines inside quotes are
// data), "" inside quotes is one quote; CRLF or LF line ends. Blank lines are skipped. Errors
// (an unterminated quote, text after a closing quote, invalid UTF-8) name `source_name` and the
// line.
Result<std::vector<CsvRecord>> ReadCsv(std::string_view text, std::string_view source_name);

// How a catalog's GPU name maps to the label registry.
struct CatalogGpu {
  std::string label;        // canonical label, or `<name>-<mem>gb` lowercased when unknown
  std::string model;        // label without the memory suffix
  std::string form_factor;  // "sxm", "pcie", "nvl" when the name alone says so
  double vram_gb = 0;       // `memory_gib` when given, else the label's nominal size
  bool known = false;       // the label is in KnownGpuLabels()
};

// Maps a catalog accelerator name (`A100-80GB`, `A10G`, `H100-MEGA`, `A6000`) and its per-GPU
// memory in GiB (0 = not given) to a label. Catalog spellings the registry does not use go
// through a small alias table in catalog.cc; names that still map to nothing keep a lowercase
// label with known == false, so callers count them instead of dropping the row.
CatalogGpu MapCatalogGpu(std::string_view accelerator_name, double memory_gib);

struct CatalogImport {
  std::string provider;               // the `cloud` column, shared by every row
  std::vector<Offer> offers;          // one per priced row, in file order
  int unmapped_gpu_names = 0;         // offers whose GPU name is not a known label
  std::vector<std::string> warnings;  // rows skipped, names not mapped; "file:line: ..."
};

// Parses a catalog. Rows may mix providers here; the health score's price premium compares
// each offer with the cheapest offer of the same label in this text.
//
// Rows without an on-demand price (AWS lists p5e.48xlarge with a spot price only) are skipped
// with a warning: on-demand price 0 would rank them as free.
Result<CatalogImport> ParseCatalog(std::string_view csv_text, std::string_view source_name);

// ParseCatalog's offers only.
Result<std::vector<Offer>> ParseCatalogCsv(std::string_view csv_text, std::string_view source_name);

// Reads and parses one catalog file; errors name the file by its base name. Every row must be
// of one provider and there must be at least one offer, because a re-import replaces the
// provider's offers and an empty file would wipe them.
Result<CatalogImport> ImportCatalogFile(const std::string& path);

}  // namespace sluice::market
