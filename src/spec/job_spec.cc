#include "spec/job_spec.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/text.h"
#include "spec/spec_value.h"
#include "spec/yaml_reader.h"

namespace sluice::spec {
namespace {

using Kind = SpecValue::Kind;

// Sanity ceilings for numbers that have no limit in the contract but are surely typos when huge.
constexpr double kMaxMemoryGb = 65536;  // 64 TiB of host memory
constexpr double kMaxVramGb = 4096;
constexpr double kMaxPricePerHour = 1e6;
constexpr double kMaxTotalCost = 1e9;
constexpr int kMaxPriority = 1000;
constexpr double kMaxExpectedHours = 100000;
constexpr int64_t kMaxCheckpointIntervalS = 7 * 24 * 3600;
constexpr double kMaxCheckpointSizeGb = 100000;
constexpr size_t kMaxGpuLabelBytes = 64;
// The JSON form is converted only this deep; a job spec has 3 levels, so anything deeper is
// already an error and need not be walked (a caller-built Json could be arbitrarily deep).
constexpr int kMaxJsonDepth = 8;

constexpr std::string_view kTopFields[] = {
    "name",     "resources",      "run",       "env",       "workdir",        "max_price_per_hour",
    "priority", "expected_hours", "lifecycle", "objective", "max_total_cost", "runtime"};
constexpr std::string_view kResourceFields[] = {"gpu", "min_vram_gb", "gpus", "cpus", "memory_gb"};
constexpr std::string_view kLifecycleFields[] = {
    "capacity",     "checkpoint_interval",        "checkpoint_size_gb", "max_restarts",
    "grace_period", "fallback_after_preemptions", "fallback_after",     "max_bid_per_hour"};
// The JSON form also takes the interval as whole seconds, which is how ToJson writes it.
constexpr std::string_view kLifecycleJsonFields[] = {
    "capacity",        "checkpoint_interval", "checkpoint_interval_s",      "checkpoint_size_gb",
    "max_restarts",    "grace_period",        "fallback_after_preemptions", "fallback_after",
    "max_bid_per_hour"};
constexpr int kMaxRestarts = 1000;
constexpr int64_t kMaxGracePeriodS = 3600;

constexpr std::pair<Capacity, std::string_view> kCapacityNames[] = {
    {Capacity::kOnDemand, "on-demand"},
    {Capacity::kInterruptible, "interruptible"},
    {Capacity::kInterruptibleThenOnDemand, "interruptible-then-on-demand"},
};

constexpr std::string_view kDurationForm = "a duration such as 90s, 30m, 1h or 2h30m";

bool HasControlChar(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

bool IsEnvName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string Join(std::string_view a, std::string_view b) {
  return a.empty() ? std::string(b) : std::string(a) + "." + std::string(b);
}

// Applies the JobSpec rules to a SpecValue tree. Errors are formatted once here so the YAML
// form ("FILE:L:C: field: msg") and the JSON form ("field: msg") come from the same code.
class Validator {
 public:
  // `json`: the API form, whose `lifecycle` also takes `checkpoint_interval_s`.
  Validator(std::string_view filename, bool json) : filename_(filename), json_(json) {}

  Result<JobSpec> Validate(const SpecValue& root) {
    if (root.kind != Kind::kMap) {
      return Error(
          root.pos, "",
          "expected a mapping of job fields (run, resources, ...), got " + DescribeValue(root));
    }
    SLUICE_RETURN_IF_ERROR(CheckKeys(root, "", kTopFields));
    JobSpec spec;
    spec.name = "job";
    bool have_run = false;
    bool gpus_given = false;
    const SpecValue* gpus_node = nullptr;
    for (const auto& [key, v] : root.entries) {
      const std::string& k = key.text;
      if (k == "resources") {
        if (v.kind == Kind::kNull) continue;
        if (v.kind != Kind::kMap)
          return Error(v.pos, k, "expected a mapping, got " + DescribeValue(v));
        SLUICE_RETURN_IF_ERROR(CheckKeys(v, k, kResourceFields));
        for (const auto& [rkey, rv] : v.entries) {
          SLUICE_RETURN_IF_ERROR(Resource(rkey.text, rv, spec.resources));
          if (rkey.text == "gpus" && rv.kind != Kind::kNull) {
            gpus_given = true;
            gpus_node = &rv;
          }
        }
        continue;
      }
      if (k == "lifecycle") {
        SLUICE_RETURN_IF_ERROR(LifecycleFields(v, spec.lifecycle));
        continue;
      }
      if (k == "runtime") {
        SLUICE_ASSIGN_OR_RETURN(
            spec.runtime,
            RuntimeContractFromSpec(
                v, json_, [this](SpecPos pos, std::string_view field, std::string_view msg) {
                  return Error(pos, field, msg);
                }));
        continue;
      }
      if (v.kind == Kind::kNull && k != "run") continue;  // an empty optional field = default
      if (k == "name") {
        SLUICE_ASSIGN_OR_RETURN(spec.name, Text(v, k));
        if (spec.name.empty()) return Error(v.pos, k, "must not be empty");
        if (spec.name.size() > kMaxNameBytes) {
          return Error(v.pos, k,
                       "is " + std::to_string(spec.name.size()) + " bytes, over the limit of " +
                           std::to_string(kMaxNameBytes));
        }
        if (HasControlChar(spec.name)) {
          return Error(v.pos, k,
                       "must not contain control characters, got " + QuoteText(spec.name));
        }
      } else if (k == "run") {
        if (v.kind == Kind::kNull) return Error(v.pos, k, "must not be empty");
        SLUICE_ASSIGN_OR_RETURN(spec.run, Text(v, k));
        if (Trim(spec.run).empty()) return Error(v.pos, k, "must not be empty");
        if (spec.run.size() > kMaxRunBytes) {
          return Error(v.pos, k,
                       "is " + std::to_string(spec.run.size()) + " bytes, over the limit of " +
                           std::to_string(kMaxRunBytes) +
                           " bytes; put long scripts in a file under workdir");
        }
        if (spec.run.find('\0') != std::string::npos) {
          return Error(v.pos, k, "must not contain NUL bytes");
        }
        have_run = true;
      } else if (k == "env") {
        SLUICE_RETURN_IF_ERROR(Env(v, spec.env));
      } else if (k == "workdir") {
        SLUICE_ASSIGN_OR_RETURN(spec.workdir, Text(v, k));
        if (HasControlChar(spec.workdir)) {
          return Error(v.pos, k, "must not contain control characters");
        }
      } else if (k == "max_price_per_hour") {
        SLUICE_ASSIGN_OR_RETURN(double price, Number(v, k, "a non-negative number"));
        if (price < 0 || price > kMaxPricePerHour) {
          return Error(
              v.pos, k,
              "must be between 0 and " + Fmt(kMaxPricePerHour) + " USD per hour, got " + v.text);
        }
        spec.max_price_per_hour = price;
      } else if (k == "max_total_cost") {
        SLUICE_ASSIGN_OR_RETURN(double cost, Number(v, k, "a positive number of USD"));
        if (!(cost > 0) || cost > kMaxTotalCost) {
          return Error(
              v.pos, k,
              "must be more than 0 and at most " + Fmt(kMaxTotalCost) + " USD, got " + v.text);
        }
        spec.max_total_cost = cost;
      } else if (k == "priority") {
        SLUICE_ASSIGN_OR_RETURN(int64_t p, Int(v, k, "an integer"));
        if (p < -kMaxPriority || p > kMaxPriority) {
          return Error(v.pos, k, "must be between -1000 and 1000, got " + v.text);
        }
        spec.priority = static_cast<int>(p);
      } else if (k == "expected_hours") {
        SLUICE_ASSIGN_OR_RETURN(double hours, Number(v, k, "a positive number of hours"));
        if (hours <= 0 || hours > kMaxExpectedHours) {
          return Error(v.pos, k,
                       "must be more than 0 and at most " + Fmt(kMaxExpectedHours) +
                           " hours, got " + v.text);
        }
        spec.expected_hours = hours;
      } else if (k == "objective") {
        SLUICE_ASSIGN_OR_RETURN(std::string o, Text(v, k));
        if (v.kind != Kind::kString || (o != "cost" && o != "time" && o != "price")) {
          return Error(v.pos, k, "expected one of cost, time, price, got " + DescribeValue(v));
        }
        spec.objective = o;
      }
    }
    if (!have_run) return Error(root.pos, "run", "is required: the bash script the job runs");
    Resources& r = spec.resources;
    const bool wants_gpu = !r.gpu.empty() || r.min_vram_gb.has_value();
    if (wants_gpu && !gpus_given) r.gpus = 1;
    if (wants_gpu && r.gpus == 0) {
      return Error(gpus_node->pos, "resources.gpus",
                   "is 0 but `gpu`/`min_vram_gb` ask for a GPU; remove them or ask for 1 or more");
    }
    return spec;
  }

 private:
  Status Resource(const std::string& k, const SpecValue& v, Resources& r) {
    const std::string path = Join("resources", k);
    if (v.kind == Kind::kNull) return Status::Ok();
    if (k == "gpu") {
      SLUICE_ASSIGN_OR_RETURN(r.gpu, Text(v, path));
      if (r.gpu.empty() || r.gpu.size() > kMaxGpuLabelBytes || HasControlChar(r.gpu)) {
        return Error(v.pos, path,
                     "expected a GPU label such as a100-80gb, got " + DescribeValue(v));
      }
    } else if (k == "min_vram_gb") {
      SLUICE_ASSIGN_OR_RETURN(double gb, Number(v, path, "a positive number"));
      if (gb <= 0 || gb > kMaxVramGb) {
        return Error(v.pos, path,
                     "must be more than 0 and at most " + Fmt(kMaxVramGb) + ", got " + v.text);
      }
      r.min_vram_gb = gb;
    } else if (k == "gpus") {
      SLUICE_ASSIGN_OR_RETURN(int64_t n, Int(v, path, "a non-negative integer"));
      if (n < 0) return Error(v.pos, path, "expected a non-negative integer, got " + v.text);
      if (n > kMaxGpus) {
        return Error(
            v.pos, path,
            v.text + " is over the limit of " + std::to_string(kMaxGpus) + " GPUs per job");
      }
      r.gpus = static_cast<int>(n);
    } else if (k == "cpus") {
      SLUICE_ASSIGN_OR_RETURN(int64_t n, Int(v, path, "a positive integer"));
      if (n < 1) return Error(v.pos, path, "expected a positive integer, got " + v.text);
      if (n > kMaxCpus) {
        return Error(
            v.pos, path,
            v.text + " is over the limit of " + std::to_string(kMaxCpus) + " CPUs per job");
      }
      r.cpus = static_cast<int>(n);
    } else if (k == "memory_gb") {
      SLUICE_ASSIGN_OR_RETURN(double gb, Number(v, path, "a positive number"));
      if (gb <= 0 || gb > kMaxMemoryGb) {
        return Error(v.pos, path,
                     "must be more than 0 and at most " + Fmt(kMaxMemoryGb) + ", got " + v.text);
      }
      r.memory_gb = gb;
    }
    return Status::Ok();
  }

  Status LifecycleFields(const SpecValue& v, Lifecycle& lc) {
    const std::string k = "lifecycle";
    if (v.kind == Kind::kNull) return Status::Ok();
    if (v.kind != Kind::kMap) return Error(v.pos, k, "expected a mapping, got " + DescribeValue(v));
    if (json_) {
      SLUICE_RETURN_IF_ERROR(CheckKeys(v, k, kLifecycleJsonFields));
    } else {
      SLUICE_RETURN_IF_ERROR(CheckKeys(v, k, kLifecycleFields));
    }
    const SpecKey* interval_key = nullptr;
    SpecPos bid_pos = v.pos;
    for (const auto& [key, lv] : v.entries) {
      const std::string path = Join(k, key.text);
      if (lv.kind == Kind::kNull) continue;
      if (key.text == "capacity") {
        SLUICE_ASSIGN_OR_RETURN(lc.capacity, CapacityValue(lv, path));
      } else if (key.text == "checkpoint_interval" || key.text == "checkpoint_interval_s") {
        if (interval_key != nullptr) {
          return Error(key.pos, path,
                       "the interval is already given as `" + interval_key->text +
                           "`; give one of checkpoint_interval and checkpoint_interval_s");
        }
        interval_key = &key;
        SLUICE_ASSIGN_OR_RETURN(int64_t s, key.text == "checkpoint_interval"
                                               ? DurationValue(lv, path)
                                               : Int(lv, path, "a whole number of seconds"));
        if (s < 1 || s > kMaxCheckpointIntervalS) {
          return Error(lv.pos, path,
                       "must be at least 1s and at most 7 days (168h), got " + lv.text);
        }
        lc.checkpoint_interval_s = s;
      } else if (key.text == "checkpoint_size_gb") {
        SLUICE_ASSIGN_OR_RETURN(double gb, Number(lv, path, "a non-negative number"));
        if (gb < 0 || gb > kMaxCheckpointSizeGb) {
          return Error(lv.pos, path,
                       "must be between 0 and " + Fmt(kMaxCheckpointSizeGb) + ", got " + lv.text);
        }
        lc.checkpoint_size_gb = gb;
      } else if (key.text == "max_restarts") {
        SLUICE_ASSIGN_OR_RETURN(int64_t n, Int(lv, path, "a non-negative integer"));
        if (n < 0 || n > kMaxRestarts) {
          return Error(lv.pos, path, "must be between 0 and 1000, got " + lv.text);
        }
        lc.max_restarts = static_cast<int>(n);
      } else if (key.text == "grace_period") {
        SLUICE_ASSIGN_OR_RETURN(int64_t s, DurationValue(lv, path));
        if (s < 0 || s > kMaxGracePeriodS) {
          return Error(lv.pos, path, "must be at most 1h, got " + lv.text);
        }
        lc.grace_period_s = s;
      } else if (key.text == "fallback_after_preemptions") {
        SLUICE_ASSIGN_OR_RETURN(int64_t n, Int(lv, path, "a non-negative integer"));
        if (n < 0 || n > kMaxRestarts) {
          return Error(lv.pos, path, "must be between 0 and 1000, got " + lv.text);
        }
        lc.fallback_after_preemptions = static_cast<int>(n);
      } else if (key.text == "fallback_after") {
        SLUICE_ASSIGN_OR_RETURN(int64_t s, DurationValue(lv, path));
        if (s < 0 || s > kMaxCheckpointIntervalS) {
          return Error(lv.pos, path, "must be at most 7 days (168h), got " + lv.text);
        }
        lc.fallback_after_s = s;
      } else if (key.text == "max_bid_per_hour") {
        SLUICE_ASSIGN_OR_RETURN(double bid, Number(lv, path, "a positive number of USD per hour"));
        if (!(bid > 0) || bid > kMaxPricePerHour) {
          return Error(lv.pos, path,
                       "must be more than 0 and at most " + Fmt(kMaxPricePerHour) +
                           " USD per hour, got " + lv.text);
        }
        lc.max_bid_per_hour = bid;
        bid_pos = lv.pos;
      }
    }
    if (lc.max_bid_per_hour && lc.capacity == Capacity::kOnDemand) {
      // A bid competes for interruptible capacity only; on-demand capacity is sold at its price.
      return Error(bid_pos, Join(k, "max_bid_per_hour"),
                   "bids are for interruptible capacity: set lifecycle.capacity to "
                   "interruptible or interruptible-then-on-demand");
    }
    return Status::Ok();
  }

  Result<Capacity> CapacityValue(const SpecValue& v, const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(std::string name, Text(v, path));
    if (v.kind == Kind::kString) {
      if (auto c = CapacityFromName(name)) return *c;
    }
    std::string msg = "expected one of ";
    for (const auto& [c, n] : kCapacityNames) {
      if (c != Capacity::kOnDemand) msg += ", ";
      msg += n;
    }
    msg += ", got " + DescribeValue(v);
    const std::string lower = ToLower(name);
    std::string_view best;
    if (lower == "spot" || lower == "preemptible" || lower == "preemptable") {
      best = Name(Capacity::kInterruptible);
    } else {
      size_t best_d = std::numeric_limits<size_t>::max();
      for (const auto& [c, n] : kCapacityNames) {
        const size_t d = EditDistance(lower, n);
        if (d < best_d) best_d = d, best = n;
      }
      if (best_d > std::max<size_t>(2, best.size() / 3)) best = {};
    }
    if (!best.empty()) msg += "; did you mean `" + std::string(best) + "`?";
    return Error(v.pos, path, msg);
  }

  // A duration string ("30m"), or a whole number of seconds written as a number (900).
  Result<int64_t> DurationValue(const SpecValue& v, const std::string& path) {
    if (v.kind == Kind::kNumber) {
      return Int(v, path, ("a whole number of seconds or " + std::string(kDurationForm)).c_str());
    }
    if (v.kind != Kind::kString) {
      return Error(v.pos, path,
                   "expected " + std::string(kDurationForm) + ", got " + DescribeValue(v));
    }
    auto s = ParseDurationSeconds(v.text);
    if (!s.ok()) return Error(v.pos, path, s.status().message());
    return *s;
  }

  Status Env(const SpecValue& v, std::map<std::string, std::string>& env) {
    if (v.kind != Kind::kMap)
      return Error(v.pos, "env", "expected a mapping, got " + DescribeValue(v));
    if (v.entries.size() > kMaxEnvEntries) {
      return Error(v.pos, "env",
                   "has " + std::to_string(v.entries.size()) + " entries, over the limit of " +
                       std::to_string(kMaxEnvEntries));
    }
    for (const auto& [key, val] : v.entries) {
      const std::string& name = key.text;
      if (!IsEnvName(name)) {
        return Error(
            key.pos, "env",
            "invalid variable name " + QuoteText(name) + "; names match [A-Za-z_][A-Za-z0-9_]*");
      }
      const std::string path = "env." + name;
      if (name.starts_with("SLUICE_") || name == "CUDA_VISIBLE_DEVICES") {
        return Error(key.pos, path, "is reserved: Sluice sets it for the job");
      }
      if (val.kind == Kind::kNull) {
        return Error(val.pos.line ? val.pos : key.pos, path,
                     "has no value; write " + name + ": \"\" for an empty string");
      }
      if (val.kind == Kind::kMap || val.kind == Kind::kSeq) {
        return Error(val.pos, path, "expected a scalar value, got " + DescribeValue(val));
      }
      if (val.text.size() > kMaxEnvValueBytes) {
        return Error(val.pos, path,
                     "value is " + std::to_string(val.text.size()) + " bytes, over the limit of " +
                         std::to_string(kMaxEnvValueBytes));
      }
      if (val.text.find('\0') != std::string::npos) {
        return Error(val.pos, path, "must not contain NUL bytes");
      }
      if (!env.emplace(name, val.text).second) {
        return Error(key.pos, path, "is set twice");
      }
    }
    return Status::Ok();
  }

  // Unknown and duplicate keys, with a spelling suggestion for the unknown ones.
  template <size_t N>
  Status CheckKeys(const SpecValue& map, std::string_view path,
                   const std::string_view (&allowed)[N]) {
    std::set<std::string_view> seen;
    for (const auto& [key, v] : map.entries) {
      const std::string field = Join(path, key.text);
      bool known = false;
      for (auto a : allowed) known = known || a == key.text;
      if (!known) {
        std::string msg = "unknown field";
        std::string_view best;
        size_t best_d = std::numeric_limits<size_t>::max();
        const std::string lower = ToLower(key.text);
        for (auto a : allowed) {
          const size_t d = EditDistance(lower, a);
          if (d < best_d) best_d = d, best = a;
        }
        if (best_d <= std::max<size_t>(2, best.size() / 3)) {
          msg += "; did you mean `" + std::string(best) + "`?";
        } else if (path.empty()) {
          for (auto a : kResourceFields) {
            if (a == lower) msg += "; `" + std::string(a) + "` belongs under `resources`";
          }
          for (auto a : json_ ? std::span<const std::string_view>(kLifecycleJsonFields)
                              : std::span<const std::string_view>(kLifecycleFields)) {
            if (a == lower) msg += "; `" + std::string(a) + "` belongs under `lifecycle`";
          }
          for (RuntimeFact f : kRuntimeFacts) {
            if (Name(f) == lower) msg += "; `" + lower + "` belongs under `runtime`";
          }
        }
        return Error(key.pos, field, msg);
      }
      if (!seen.insert(key.text).second) return Error(key.pos, field, "is given twice");
    }
    return Status::Ok();
  }

  Result<std::string> Text(const SpecValue& v, const std::string& path) {
    if (v.kind == Kind::kString || v.kind == Kind::kNumber || v.kind == Kind::kBool) {
      return v.text;
    }
    return Error(v.pos, path, "expected a string, got " + DescribeValue(v));
  }

  Result<double> Number(const SpecValue& v, const std::string& path, const char* what) {
    if (v.kind == Kind::kNumber) {
      std::string_view t = v.text;
      if (!t.empty() && t[0] == '+') t.remove_prefix(1);
      double d = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), d);
      if (ec == std::errc() && end == t.data() + t.size() && std::isfinite(d)) return d;
    }
    return Error(v.pos, path, std::string("expected ") + what + ", got " + DescribeValue(v));
  }

  Result<int64_t> Int(const SpecValue& v, const std::string& path, const char* what) {
    if (v.kind == Kind::kNumber) {
      std::string_view t = v.text;
      if (!t.empty() && t[0] == '+') t.remove_prefix(1);
      int64_t n = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
      if (ec == std::errc() && end == t.data() + t.size()) return n;
      if (ec == std::errc::result_out_of_range) {
        return Error(v.pos, path, "the number " + v.text + " is out of range");
      }
    }
    return Error(v.pos, path, std::string("expected ") + what + ", got " + DescribeValue(v));
  }

  static std::string Fmt(double d) {
    char buf[32];
    // Fixed notation: limits read 100000, not 1e+05.
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
    return ec == std::errc() ? std::string(buf, end) : std::string("?");
  }

  Status Error(SpecPos pos, std::string_view field, std::string_view msg) const {
    std::string out;
    if (!filename_.empty()) {
      out = filename_;
      if (pos.line > 0) out += ":" + std::to_string(pos.line) + ":" + std::to_string(pos.col);
      out += ": ";
    }
    if (!field.empty()) out += EscapeControl(field) + ": ";
    out += msg;
    return Status::InvalidArgument(std::move(out));
  }

  std::string filename_;
  bool json_ = false;
};

SpecValue FromJsonValue(const Json& j, int depth) {
  SpecValue v;
  switch (j.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      break;
    case Json::value_t::string:
      v.kind = Kind::kString;
      v.text = j.get_ref<const std::string&>();
      break;
    case Json::value_t::boolean:
      v.kind = Kind::kBool;
      v.text = j.get<bool>() ? "true" : "false";
      break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      v.kind = Kind::kNumber;
      v.text = DumpJson(j);
      break;
    case Json::value_t::object:
      v.kind = Kind::kMap;
      if (depth < kMaxJsonDepth) {
        for (const auto& [k, child] : j.items()) {
          v.entries.emplace_back(SpecKey{k, {}}, FromJsonValue(child, depth + 1));
        }
      }
      break;
    case Json::value_t::array:
    case Json::value_t::binary:
      v.kind = Kind::kSeq;
      if (depth < kMaxJsonDepth && j.is_array()) {
        for (const auto& child : j) v.items.push_back(FromJsonValue(child, depth + 1));
      }
      break;
  }
  return v;
}

}  // namespace

Result<JobSpec> ParseJobSpecYaml(std::string_view text, std::string_view filename) {
  // Checked before parsing so an oversized body costs nothing beyond reading it.
  if (text.size() > kMaxSpecBytes) {
    return Status::InvalidArgument(std::string(filename) + ": the spec is " +
                                   std::to_string(text.size()) + " bytes, over the limit of " +
                                   std::to_string(kMaxSpecBytes) + " bytes");
  }
  SLUICE_ASSIGN_OR_RETURN(SpecValue root, ReadYaml(text, filename));
  return Validator(filename, /*json=*/false).Validate(root);
}

Result<JobSpec> JobSpecFromJson(const Json& j) {
  return Validator("", /*json=*/true).Validate(FromJsonValue(j, 0));
}

Json ToJson(const JobSpec& spec) {
  Json resources = Json::object();
  const Resources& r = spec.resources;
  if (!r.gpu.empty()) resources["gpu"] = r.gpu;
  if (r.min_vram_gb) resources["min_vram_gb"] = *r.min_vram_gb;
  resources["gpus"] = r.gpus;
  resources["cpus"] = r.cpus;
  resources["memory_gb"] = r.memory_gb;
  Json j = Json::object();
  j["name"] = spec.name;
  j["resources"] = std::move(resources);
  j["run"] = spec.run;
  Json env = Json::object();
  for (const auto& [k, v] : spec.env) env[k] = v;
  j["env"] = std::move(env);
  if (!spec.workdir.empty()) j["workdir"] = spec.workdir;
  if (spec.max_price_per_hour) j["max_price_per_hour"] = *spec.max_price_per_hour;
  if (spec.max_total_cost) j["max_total_cost"] = *spec.max_total_cost;
  j["priority"] = spec.priority;
  if (spec.expected_hours) j["expected_hours"] = *spec.expected_hours;
  if (!spec.objective.empty()) j["objective"] = spec.objective;
  const Lifecycle& lc = spec.lifecycle;
  if (lc != Lifecycle{}) {
    Json lifecycle = Json::object();
    lifecycle["capacity"] = std::string(Name(lc.capacity));
    if (lc.checkpoint_interval_s) lifecycle["checkpoint_interval_s"] = *lc.checkpoint_interval_s;
    lifecycle["checkpoint_size_gb"] = lc.checkpoint_size_gb;
    lifecycle["max_restarts"] = lc.max_restarts;
    lifecycle["grace_period"] = lc.grace_period_s;
    lifecycle["fallback_after_preemptions"] = lc.fallback_after_preemptions;
    lifecycle["fallback_after"] = lc.fallback_after_s;
    if (lc.max_bid_per_hour) lifecycle["max_bid_per_hour"] = *lc.max_bid_per_hour;
    j["lifecycle"] = std::move(lifecycle);
  }
  if (!spec.runtime.empty()) j["runtime"] = ToJson(spec.runtime);
  return j;
}

std::string_view Name(Capacity capacity) {
  for (const auto& [c, n] : kCapacityNames) {
    if (c == capacity) return n;
  }
  return "unknown";
}

std::optional<Capacity> CapacityFromName(std::string_view name) {
  for (const auto& [c, n] : kCapacityNames) {
    if (n == name) return c;
  }
  return std::nullopt;
}

Result<int64_t> ParseDurationSeconds(std::string_view text) {
  const auto expected = [&](std::string_view what) {
    return Status::InvalidArgument("expected " + std::string(what) + ", got " + QuoteText(text));
  };
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  // Each number is at most 12 significant digits before the point, so a total of three parts
  // stays far inside int64 (10^12 h is 3.6e15 s); the fraction is exact integer arithmetic.
  constexpr size_t kMaxIntDigits = 12;
  constexpr size_t kMaxFracDigits = 9;
  constexpr struct {
    char unit;
    int64_t seconds;
  } kUnits[] = {{'h', 3600}, {'m', 60}, {'s', 1}};

  if (text.empty()) return expected(kDurationForm);
  size_t i = 0;
  size_t next_unit = 0;  // units must come in kUnits order, each at most once
  int64_t total = 0;
  while (i < text.size()) {
    const size_t int_start = i;
    while (i < text.size() && is_digit(text[i])) ++i;
    std::string_view int_part = text.substr(int_start, i - int_start);
    if (int_part.empty()) return expected(kDurationForm);
    std::string_view frac;
    if (i < text.size() && text[i] == '.') {
      const size_t frac_start = ++i;
      while (i < text.size() && is_digit(text[i])) ++i;
      frac = text.substr(frac_start, i - frac_start);
      if (frac.empty()) return expected(kDurationForm);
    }
    int64_t unit_s = 1;
    if (i == text.size()) {
      // A bare whole number is seconds; a number without a unit after other parts is not.
      if (int_start != 0 || !frac.empty()) return expected(kDurationForm);
    } else {
      size_t u = 0;
      while (u < std::size(kUnits) && kUnits[u].unit != text[i]) ++u;
      if (u == std::size(kUnits)) return expected(kDurationForm);
      if (u < next_unit) {
        return expected(std::string(kDurationForm) + " (units in the order h, m, s, each once)");
      }
      next_unit = u + 1;
      unit_s = kUnits[u].seconds;
      ++i;
    }
    while (int_part.size() > 1 && int_part[0] == '0') int_part.remove_prefix(1);
    if (int_part.size() > kMaxIntDigits) {
      return Status::InvalidArgument("the duration " + QuoteText(text) + " is out of range");
    }
    int64_t whole = 0;
    std::from_chars(int_part.data(), int_part.data() + int_part.size(), whole);
    total += whole * unit_s;
    while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);
    if (!frac.empty()) {
      // Past 9 significant decimals no fraction of an hour is a whole number of seconds.
      if (frac.size() > kMaxFracDigits) return expected("a whole number of seconds");
      int64_t num = 0;
      int64_t den = 1;
      std::from_chars(frac.data(), frac.data() + frac.size(), num);
      for (size_t d = 0; d < frac.size(); ++d) den *= 10;
      if (num * unit_s % den != 0) return expected("a whole number of seconds");
      total += num * unit_s / den;
    }
  }
  return total;
}

}  // namespace sluice::spec
