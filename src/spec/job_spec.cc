#include "spec/job_spec.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <string>
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
constexpr int kMaxPriority = 1000;
constexpr size_t kMaxGpuLabelBytes = 64;
// The JSON form is converted only this deep; a job spec has 3 levels, so anything deeper is
// already an error and need not be walked (a caller-built Json could be arbitrarily deep).
constexpr int kMaxJsonDepth = 8;

constexpr std::string_view kTopFields[] = {"name",    "resources",          "run",     "env",
                                           "workdir", "max_price_per_hour", "priority"};
constexpr std::string_view kResourceFields[] = {"gpu", "min_vram_gb", "gpus", "cpus", "memory_gb"};

// User text shown inside a one-line message: truncated, control bytes escaped.
std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 40;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += (c == '"' || c == '\\') ? std::string{'\\', static_cast<char>(c)}
                                     : std::string{'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "\"";
}

std::string Describe(const SpecValue& v) {
  switch (v.kind) {
    case Kind::kString:
      return "string " + Quote(v.text);
    case Kind::kNumber:
      return v.text;
    case Kind::kBool:
      return "boolean " + v.text;
    case Kind::kNull:
      return "null";
    case Kind::kMap:
      return "a mapping";
    case Kind::kSeq:
      return "a sequence";
  }
  return "a value";
}

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
  explicit Validator(std::string_view filename) : filename_(filename) {}

  Result<JobSpec> Validate(const SpecValue& root) {
    if (root.kind != Kind::kMap) {
      return Error(root.pos, "",
                   "expected a mapping of job fields (run, resources, ...), got " + Describe(root));
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
        if (v.kind != Kind::kMap) return Error(v.pos, k, "expected a mapping, got " + Describe(v));
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
          return Error(v.pos, k, "must not contain control characters, got " + Quote(spec.name));
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
      } else if (k == "priority") {
        SLUICE_ASSIGN_OR_RETURN(int64_t p, Int(v, k, "an integer"));
        if (p < -kMaxPriority || p > kMaxPriority) {
          return Error(v.pos, k, "must be between -1000 and 1000, got " + v.text);
        }
        spec.priority = static_cast<int>(p);
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
        return Error(v.pos, path, "expected a GPU label such as a100-80gb, got " + Describe(v));
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

  Status Env(const SpecValue& v, std::map<std::string, std::string>& env) {
    if (v.kind != Kind::kMap) return Error(v.pos, "env", "expected a mapping, got " + Describe(v));
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
            "invalid variable name " + Quote(name) + "; names match [A-Za-z_][A-Za-z0-9_]*");
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
        return Error(val.pos, path, "expected a scalar value, got " + Describe(val));
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
    return Error(v.pos, path, "expected a string, got " + Describe(v));
  }

  Result<double> Number(const SpecValue& v, const std::string& path, const char* what) {
    if (v.kind == Kind::kNumber) {
      std::string_view t = v.text;
      if (!t.empty() && t[0] == '+') t.remove_prefix(1);
      double d = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), d);
      if (ec == std::errc() && end == t.data() + t.size() && std::isfinite(d)) return d;
    }
    return Error(v.pos, path, std::string("expected ") + what + ", got " + Describe(v));
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
    return Error(v.pos, path, std::string("expected ") + what + ", got " + Describe(v));
  }

  static std::string Fmt(double d) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
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
  return Validator(filename).Validate(root);
}

Result<JobSpec> JobSpecFromJson(const Json& j) {
  return Validator("").Validate(FromJsonValue(j, 0));
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
  j["priority"] = spec.priority;
  return j;
}

}  // namespace sluice::spec
