#include "spec/runtime_contract.h"

#include <limits>
#include <set>

#include "common/crypto.h"
#include "common/text.h"

namespace sluice::spec {
namespace {

using Kind = SpecValue::Kind;

constexpr std::pair<VersionOp, std::string_view> kOpNames[] = {
    {VersionOp::kEq, "="},  {VersionOp::kGe, ">="}, {VersionOp::kGt, ">"},
    {VersionOp::kLe, "<="}, {VersionOp::kLt, "<"},
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Digits and dots, no empty component: "12.1", "535.104.05", "3.10".
bool IsDottedNumber(std::string_view v) {
  if (v.empty() || v.front() == '.' || v.back() == '.') return false;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '.') {
      if (v[i + 1] == '.') return false;
    } else if (!IsDigit(v[i])) {
      return false;
    }
  }
  return true;
}

// The query language's version alphabet (market/query.cc ValidVersion, without patterns), so a
// contract that validates here always compiles there.
bool IsTorchVersion(std::string_view v) {
  if (v.empty() || !IsDigit(v[0])) return false;
  for (char c : v) {
    const bool ok =
        IsDigit(c) || (c >= 'a' && c <= 'z') || c == '.' || c == '+' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::string_view Example(RuntimeFact fact) {
  switch (fact) {
    case RuntimeFact::kCuda:
      return "a CUDA version such as \"12.1\" or \">=12.1\"";
    case RuntimeFact::kDriver:
      return "a driver version such as \"535.104\" or \">=535\"";
    case RuntimeFact::kTorch:
      return "a PyTorch version such as \"2.1.0\" or \"2.1.0+cu121\"";
    case RuntimeFact::kPython:
      return "a Python version such as \"3.10\" or \">=3.10\"";
  }
  return "a version";
}

std::optional<RuntimeFact> FactFromName(std::string_view name) {
  for (RuntimeFact f : kRuntimeFacts) {
    if (Name(f) == name) return f;
  }
  return std::nullopt;
}

}  // namespace

std::string_view Name(RuntimeFact fact) {
  switch (fact) {
    case RuntimeFact::kCuda:
      return "cuda";
    case RuntimeFact::kDriver:
      return "driver";
    case RuntimeFact::kTorch:
      return "torch";
    case RuntimeFact::kPython:
      return "python";
  }
  return "cuda";
}

std::string_view Name(VersionOp op) {
  for (const auto& [o, n] : kOpNames) {
    if (o == op) return n;
  }
  return "=";
}

const std::optional<VersionConstraint>& RuntimeContract::Get(RuntimeFact fact) const {
  switch (fact) {
    case RuntimeFact::kCuda:
      return cuda;
    case RuntimeFact::kDriver:
      return driver;
    case RuntimeFact::kTorch:
      return torch;
    case RuntimeFact::kPython:
      return python;
  }
  return cuda;
}

std::optional<VersionConstraint>& RuntimeContract::Get(RuntimeFact fact) {
  const auto& self = *this;
  return const_cast<std::optional<VersionConstraint>&>(self.Get(fact));
}

VersionOp DefaultOp(RuntimeFact fact) {
  // A driver supports every CUDA up to the one it reports, so asking for a CUDA asks for at
  // least it; the other facts name what is installed, so a bare version pins it.
  return fact == RuntimeFact::kCuda ? VersionOp::kGe : VersionOp::kEq;
}

Result<VersionConstraint> ParseVersionConstraint(RuntimeFact fact, std::string_view text) {
  const auto bad = [&] {
    return Status::InvalidArgument("expected " + std::string(Example(fact)) + ", got " +
                                   QuoteText(text));
  };
  std::string rest = Trim(text);
  VersionConstraint c;
  c.op = DefaultOp(fact);
  // Longest operator first, so ">=" is not read as ">" followed by "=12.1".
  static constexpr std::pair<std::string_view, VersionOp> kSpellings[] = {
      {">=", VersionOp::kGe}, {"<=", VersionOp::kLe}, {"==", VersionOp::kEq},
      {">", VersionOp::kGt},  {"<", VersionOp::kLt},  {"=", VersionOp::kEq},
  };
  for (const auto& [spelling, op] : kSpellings) {
    if (std::string_view(rest).substr(0, spelling.size()) == spelling) {
      c.op = op;
      rest = Trim(std::string_view(rest).substr(spelling.size()));
      break;
    }
  }
  if (rest.size() > kMaxRuntimeVersionBytes) {
    return Status::InvalidArgument("the version " + QuoteText(text) + " is over the limit of " +
                                   std::to_string(kMaxRuntimeVersionBytes) + " bytes");
  }
  c.version = ToLower(rest);
  const bool ok =
      fact == RuntimeFact::kTorch ? IsTorchVersion(c.version) : IsDottedNumber(c.version);
  if (!ok) return bad();
  return c;
}

std::string ToString(RuntimeFact fact, const VersionConstraint& c) {
  if (c.op == DefaultOp(fact)) return c.version;
  return std::string(Name(c.op)) + c.version;
}

Result<RuntimeContract> RuntimeContractFromSpec(const SpecValue& value, bool json,
                                                const SpecErrorFn& error) {
  const std::string path = "runtime";
  RuntimeContract contract;
  if (value.kind == Kind::kNull) return contract;
  if (value.kind != Kind::kMap) {
    return error(value.pos, path,
                 "expected a mapping such as {cuda: \"12.1\", python: \"3.10\"}, got " +
                     DescribeValue(value));
  }
  std::set<std::string_view> seen;
  for (const auto& [key, v] : value.entries) {
    const std::string field = path + "." + key.text;
    const std::optional<RuntimeFact> fact = FactFromName(key.text);
    if (!fact) {
      std::string msg = "unknown field";
      // A string, not a view: the alias below is a temporary.
      std::string best;
      size_t best_d = std::numeric_limits<size_t>::max();
      const std::string lower = ToLower(key.text);
      for (RuntimeFact f : kRuntimeFacts) {
        const size_t d = EditDistance(lower, Name(f));
        if (d < best_d) best_d = d, best = std::string(Name(f));
      }
      if (lower == "pytorch" || lower == "cuda_version" || lower == "driver_version" ||
          lower == "python_version") {
        best = lower == "pytorch" ? "torch" : lower.substr(0, lower.find('_'));
        best_d = 0;
      }
      if (best_d <= 2) msg += "; did you mean `" + std::string(best) + "`?";
      msg += " (runtime takes cuda, driver, torch, python)";
      return error(key.pos, field, msg);
    }
    if (!seen.insert(key.text).second) return error(key.pos, field, "is given twice");
    if (v.kind == Kind::kNull) continue;  // an empty optional field = no requirement
    const bool text_ok = v.kind == Kind::kString || (!json && v.kind == Kind::kNumber);
    if (!text_ok) {
      std::string msg = "expected " + std::string(Example(*fact)) + ", got " + DescribeValue(v);
      if (json && v.kind == Kind::kNumber) msg += " (write versions as strings)";
      return error(v.pos, field, msg);
    }
    if (Trim(v.text).empty()) return error(v.pos, field, "must not be empty");
    auto parsed = ParseVersionConstraint(*fact, v.text);
    if (!parsed.ok()) return error(v.pos, field, parsed.status().message());
    contract.Get(*fact) = *std::move(parsed);
  }
  return contract;
}

Json ToJson(const RuntimeContract& contract) {
  Json j = Json::object();
  for (RuntimeFact f : kRuntimeFacts) {
    if (const auto& c = contract.Get(f)) j[std::string(Name(f))] = ToString(f, *c);
  }
  return j;
}

Fingerprint EnvironmentFingerprint(const RuntimeContract& contract) {
  Fingerprint fp;
  // nlohmann::json objects keep keys sorted and DumpJson writes no whitespace, so equal
  // contracts give equal bytes.
  fp.canonical_json = DumpJson(ToJson(contract));
  fp.sha256 = Sha256Hex(fp.canonical_json);
  return fp;
}

}  // namespace sluice::spec
