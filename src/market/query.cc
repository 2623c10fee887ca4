#include "market/query.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>
#include <utility>
#include <variant>

#include "common/text.h"
#include "market/gpu_labels.h"

namespace sluice::market {
namespace {

// Queries arrive over the API too; bound the work (and the size of error messages) a hostile
// one can cause. Real queries are a few hundred bytes.
constexpr size_t kMaxQueryBytes = 16 * 1024;

struct FieldInfo {
  Field field;
  std::string_view name;
  FieldType type;
};

// Indexed by static_cast<int>(Field); the static_assert below keeps it in step with the enum.
constexpr std::array<FieldInfo, 27> kFields = {{
    {Field::kGpu, "gpu", FieldType::kLabel},
    {Field::kModel, "model", FieldType::kString},
    {Field::kGpus, "gpus", FieldType::kInt},
    {Field::kVram, "vram", FieldType::kNumber},
    {Field::kPrice, "price", FieldType::kNumber},
    {Field::kSpotPrice, "spot_price", FieldType::kNumber},
    {Field::kProvider, "provider", FieldType::kString},
    {Field::kNode, "node", FieldType::kString},
    {Field::kRegion, "region", FieldType::kString},
    {Field::kZone, "zone", FieldType::kString},
    {Field::kForm, "form", FieldType::kString},
    {Field::kInterconnect, "interconnect", FieldType::kString},
    {Field::kCc, "cc", FieldType::kVersion},
    {Field::kDriver, "driver", FieldType::kVersion},
    {Field::kCuda, "cuda", FieldType::kVersion},
    {Field::kToolkit, "toolkit", FieldType::kVersionList},
    {Field::kTorch, "torch", FieldType::kVersionList},
    {Field::kPython, "python", FieldType::kVersion},
    {Field::kCpus, "cpus", FieldType::kInt},
    {Field::kMemory, "memory", FieldType::kNumber},
    {Field::kDisk, "disk", FieldType::kNumber},
    {Field::kReliability, "reliability", FieldType::kNumber},
    {Field::kHealth, "health", FieldType::kNumber},
    {Field::kPerf, "perf", FieldType::kNumber},
    {Field::kVerified, "verified", FieldType::kEnum},
    {Field::kSource, "source", FieldType::kEnum},
    {Field::kId, "id", FieldType::kString},
}};
static_assert(static_cast<size_t>(Field::kId) + 1 == kFields.size());

// Offer member names and the words people type, so `gpus_available>=2` and `ram>=64GB` work.
constexpr std::array<std::pair<std::string_view, Field>, 25> kAliases = {{
    {"gpu_label", Field::kGpu},
    {"label", Field::kGpu},
    {"gpu_model", Field::kModel},
    {"gpus_available", Field::kGpus},
    {"vram_gb", Field::kVram},
    {"price_per_gpu_hour", Field::kPrice},
    {"interruptible", Field::kSpotPrice},
    {"interruptible_price_per_gpu_hour", Field::kSpotPrice},
    {"spot", Field::kSpotPrice},
    {"form_factor", Field::kForm},
    {"compute_capability", Field::kCc},
    {"driver_version", Field::kDriver},
    {"cuda_version", Field::kCuda},
    {"toolkits", Field::kToolkit},
    {"torch_builds", Field::kTorch},
    {"pytorch", Field::kTorch},
    {"python_version", Field::kPython},
    {"memory_gb", Field::kMemory},
    {"ram", Field::kMemory},
    {"disk_gb", Field::kDisk},
    {"health_score", Field::kHealth},
    {"perf_score", Field::kPerf},
    {"verified_state", Field::kVerified},
    {"cpu", Field::kCpus},
    {"offer", Field::kId},
}};

const FieldInfo& Info(Field f) { return kFields[static_cast<size_t>(f)]; }

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool HasGlob(std::string_view s) { return s.find_first_of("*?") != std::string_view::npos; }

// `lower` is already lowercase (query values are lowercased at parse time).
bool EqualsLower(std::string_view lower, std::string_view s) {
  if (lower.size() != s.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (lower[i] != Lower(s[i])) return false;
  }
  return true;
}

// Iterative glob with single-star backtracking: linear in practice and never exponential, so a
// hostile pattern like `*a*a*a*a*b` cannot stall the matcher. `pattern` is lowercase.
bool GlobMatch(std::string_view pattern, std::string_view s) {
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = i;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == Lower(s[i]))) {
      ++p;
      ++i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// Same order as sluice::CompareVersions, without allocating: the matcher runs this per offer.
// Parts split on '.', a missing part counts as "0", all-digit parts compare as numbers, any
// other pair compares bytewise.
int VersionCmp(std::string_view a, std::string_view b) {
  size_t ia = 0, ib = 0;
  bool a_done = false, b_done = false;
  auto next = [](std::string_view s, size_t& i, bool& done) -> std::string_view {
    if (done) return "0";
    size_t dot = s.find('.', i);
    std::string_view part;
    if (dot == std::string_view::npos) {
      part = s.substr(i);
      done = true;
    } else {
      part = s.substr(i, dot - i);
      i = dot + 1;
    }
    return part;
  };
  auto all_digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), IsDigit);
  };
  while (!a_done || !b_done) {
    std::string_view x = next(a, ia, a_done);
    std::string_view y = next(b, ib, b_done);
    if (all_digits(x) && all_digits(y)) {
      size_t kx = x.find_first_not_of('0'), ky = y.find_first_not_of('0');
      x = kx == std::string_view::npos ? std::string_view("0") : x.substr(kx);
      y = ky == std::string_view::npos ? std::string_view("0") : y.substr(ky);
      if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
    }
    int c = x.compare(y);
    if (c != 0) return c < 0 ? -1 : 1;
  }
  return 0;
}

std::string_view TextOf(Field f, const Offer& o) {
  switch (f) {
    case Field::kGpu:
      return o.gpu_label;
    case Field::kModel:
      return o.gpu_model;
    case Field::kProvider:
      return o.provider;
    case Field::kNode:
      return o.node;
    case Field::kRegion:
      return o.region;
    case Field::kZone:
      return o.zone;
    case Field::kForm:
      return o.form_factor;
    case Field::kInterconnect:
      return o.interconnect;
    case Field::kCc:
      return o.compute_capability;
    case Field::kDriver:
      return o.driver_version;
    case Field::kCuda:
      return o.cuda_version;
    case Field::kPython:
      return o.python_version;
    case Field::kVerified:
      return Name(o.verified);
    case Field::kSource:
      return Name(o.source);
    case Field::kId:
      return o.id;
    default:
      return {};
  }
}

// NaN marks an unknown value (SQL NULL).
double NumberOf(Field f, const Offer& o) {
  constexpr double kNull = std::numeric_limits<double>::quiet_NaN();
  switch (f) {
    case Field::kGpus:
      return o.gpus_available;
    case Field::kVram:
      return o.vram_gb;
    case Field::kPrice:
      return o.price_per_gpu_hour;
    case Field::kSpotPrice:
      // 0 means no interruptible capacity, not a free GPU: `spot_price<1` must skip it.
      return o.interruptible_price_per_gpu_hour > 0 ? o.interruptible_price_per_gpu_hour : kNull;
    case Field::kCpus:
      return o.cpus;
    case Field::kMemory:
      return o.memory_gb;
    case Field::kDisk:
      return o.disk_gb;
    case Field::kReliability:
      return o.reliability;
    case Field::kHealth:
      return o.health_score;
    case Field::kPerf:
      return o.perf_score;
    case Field::kVerified:
      return static_cast<int>(o.verified);
    case Field::kSource:
      return static_cast<int>(o.source);
    default:
      return kNull;
  }
}

const std::vector<std::string>& ListOf(Field f, const Offer& o) {
  return f == Field::kToolkit ? o.toolkits : o.torch_builds;
}

bool CompareHolds(Op op, int c) {
  switch (op) {
    case Op::kEq:
    case Op::kIn:
      return c == 0;
    case Op::kNe:
    case Op::kNotIn:
      return c != 0;
    case Op::kLt:
      return c < 0;
    case Op::kLe:
      return c <= 0;
    case Op::kGt:
      return c > 0;
    case Op::kGe:
      return c >= 0;
  }
  return false;
}

bool IsNegated(Op op) { return op == Op::kNe || op == Op::kNotIn; }

// `offer_value` cut to as many dotted parts as `value` has: "3.10.12" at the precision of
// "3.10" is "3.10".
std::string_view AtPrecisionOf(std::string_view value, std::string_view offer_value) {
  size_t parts = 1 + std::count(value.begin(), value.end(), '.');
  size_t end = 0;
  while (end < offer_value.size()) {
    if (offer_value[end] == '.' && --parts == 0) break;
    ++end;
  }
  return offer_value.substr(0, end);
}

// One version against one term value, positive sense (= for = and !=, in for in and notin).
// `at_precision`: compare at the precision the value is written (the `python` field).
bool VersionValueHolds(Op op, std::string_view value, std::string_view offer_value,
                       bool at_precision) {
  if (HasGlob(value)) return GlobMatch(value, offer_value);
  // `torch=2.1.0` should find the build 2.1.0+cu121: without a `+` of its own, the value
  // ignores the offer's local version suffix.
  if (value.find('+') == std::string_view::npos) {
    offer_value = offer_value.substr(0, offer_value.find('+'));
  }
  // A Python series is what a job needs ("3.10"), so 3.10.12 must count as 3.10 rather than
  // as newer than 3.10.0.
  if (at_precision) offer_value = AtPrecisionOf(value, offer_value);
  const Op positive = op == Op::kNe ? Op::kEq : op == Op::kNotIn ? Op::kIn : op;
  return CompareHolds(positive, VersionCmp(offer_value, value));
}

bool VersionHolds(const Term& t, std::string_view offer_value) {
  const bool at_precision = t.field == Field::kPython;
  for (const std::string& v : t.values) {
    if (VersionValueHolds(t.op, v, offer_value, at_precision)) return true;
  }
  return false;
}

struct Bad {
  size_t value_index = 0;  // which value the message is about
  std::string head;        // "<head> at column N<tail>"
  std::string tail;
};

std::string FormatNumber(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "0";
  return std::string(buf, end);
}

std::string Ticked(std::string_view s) {
  std::string out = "`";
  for (char c : s.substr(0, 64)) out += std::iscntrl(static_cast<unsigned char>(c)) ? '?' : c;
  if (s.size() > 64) out += "...";
  return out + "`";
}

std::string TypeDescription(FieldType t) {
  switch (t) {
    case FieldType::kString:
      return "a string field";
    case FieldType::kLabel:
      return "a GPU label field";
    case FieldType::kEnum:
      return "an enum field";
    case FieldType::kInt:
      return "an integer field";
    case FieldType::kNumber:
      return "a number field";
    case FieldType::kVersion:
      return "a version field";
    case FieldType::kVersionList:
      return "a version list field";
  }
  return "a field";
}

std::vector<std::string_view> EnumNames(Field f) {
  if (f == Field::kVerified) return {"verified", "unverified", "deverified"};
  return {"agent", "catalog"};
}

// Parses one numeric value with its unit into base units. Returns an error message on failure.
std::optional<std::string> ParseNumber(Field f, std::string_view raw, double* out) {
  const FieldType type = Info(f).type;
  const std::string name(Info(f).name);
  std::string_view s = raw;
  if ((f == Field::kPrice || f == Field::kSpotPrice) && !s.empty() && s[0] == '$') {
    s.remove_prefix(1);
  }
  if (type == FieldType::kInt) {
    long long n = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    // Bounded so the value is exact as a double (and no llabs(LLONG_MIN) overflow).
    constexpr long long kMaxInt = 1LL << 50;
    if (ec != std::errc() || p != s.data() + s.size() || n > kMaxInt || n < -kMaxInt) {
      return "expected a whole number for `" + name + "`, got " + Ticked(raw);
    }
    *out = static_cast<double>(n);
    return std::nullopt;
  }
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data() || !std::isfinite(v)) {
    return "expected a number for `" + name + "`, got " + Ticked(raw);
  }
  const std::string unit = ToLower(std::string_view(p, s.data() + s.size() - p));
  double scale = 1;
  if (unit.empty()) {
    scale = 1;
  } else if (f == Field::kVram || f == Field::kMemory || f == Field::kDisk) {
    if (unit == "g" || unit == "gb" || unit == "gib") {
      scale = 1;
    } else if (unit == "m" || unit == "mb" || unit == "mib") {
      scale = 1.0 / 1024;
    } else if (unit == "t" || unit == "tb" || unit == "tib") {
      scale = 1024;
    } else {
      return "unknown unit " + Ticked(unit) + " in " + Ticked(raw) + " for `" + name +
             "`: use GB, MB or TB (binary: 1 GB = 1024 MB)";
    }
  } else if (f == Field::kReliability && unit == "%") {
    // Divide rather than multiply by 0.01 so `99%` is exactly the double 0.99.
    *out = v / 100;
    return std::nullopt;
  } else {
    return "expected a number for `" + name + "`, got " + Ticked(raw);
  }
  *out = v * scale;
  return std::nullopt;
}

bool ValidVersion(std::string_view v, bool glob_ok) {
  if (v.empty()) return false;
  if (!IsDigit(v[0]) && !(glob_ok && (v[0] == '*' || v[0] == '?'))) return false;
  for (char c : v) {
    const bool ok = IsDigit(c) || (c >= 'a' && c <= 'z') || c == '.' || c == '+' || c == '-' ||
                    c == '_' || (glob_ok && (c == '*' || c == '?'));
    if (!ok) return false;
  }
  return true;
}

// Compiles validated syntax (field, op, raw value texts) into a Term. Shared by the parser and
// QueryFromResources so both produce identical terms.
std::variant<Term, Bad> Compile(Field field, Op op, const std::vector<std::string>& raw) {
  Term t;
  t.field = field;
  t.op = op;
  const FieldType type = Info(field).type;
  const std::string name(Info(field).name);
  const bool equality = op == Op::kEq || op == Op::kNe || op == Op::kIn || op == Op::kNotIn;
  for (size_t i = 0; i < raw.size(); ++i) {
    switch (type) {
      case FieldType::kInt:
      case FieldType::kNumber: {
        double v = 0;
        if (auto err = ParseNumber(field, raw[i], &v)) return Bad{i, *err, ""};
        t.numbers.push_back(v);
        t.values.push_back(type == FieldType::kInt ? std::to_string(static_cast<long long>(v))
                                                   : FormatNumber(v));
        break;
      }
      case FieldType::kString: {
        std::string v = ToLower(raw[i]);
        if (HasGlob(v)) t.glob = true;
        t.values.push_back(std::move(v));
        break;
      }
      case FieldType::kEnum: {
        const std::string v = ToLower(raw[i]);
        const auto names = EnumNames(field);
        auto it = std::find(names.begin(), names.end(), v);
        if (it == names.end()) {
          std::string list;
          for (auto n : names) list += (list.empty() ? "" : ", ") + std::string(n);
          return Bad{i, "expected one of " + list + " for `" + name + "`, got " + Ticked(raw[i]),
                     ""};
        }
        t.numbers.push_back(static_cast<double>(it - names.begin()));
        t.values.push_back(v);
        break;
      }
      case FieldType::kVersion:
      case FieldType::kVersionList: {
        std::string v = ToLower(raw[i]);
        if (!ValidVersion(v, /*glob_ok=*/true)) {
          return Bad{i, "expected a version for `" + name + "` (like 12.1), got " + Ticked(raw[i]),
                     ""};
        }
        if (HasGlob(v)) {
          if (!equality) {
            return Bad{i,
                       "a pattern (`*`, `?`) in " + Ticked(raw[i]) +
                           " is only valid with =, "
                           "!=, in or notin",
                       ""};
          }
          t.glob = true;
        }
        t.values.push_back(std::move(v));
        break;
      }
      case FieldType::kLabel: {
        std::string v = ToLower(raw[i]);
        if (HasGlob(v)) {
          t.glob = true;
        } else {
          auto res = ResolveGpuLabel(v);
          if (!res.ok()) {
            // Put the column right after "unknown GPU `x`", before the suggestions.
            std::string msg = res.status().message();
            size_t cut = msg.rfind("; ");
            if (cut == std::string::npos) cut = msg.size();
            return Bad{i, msg.substr(0, cut), msg.substr(cut)};
          }
          t.labels.insert(t.labels.end(), res->labels.begin(), res->labels.end());
        }
        t.values.push_back(std::move(v));
        break;
      }
    }
  }
  std::sort(t.labels.begin(), t.labels.end());
  t.labels.erase(std::unique(t.labels.begin(), t.labels.end()), t.labels.end());
  return t;
}

std::string FieldList() {
  std::string out;
  for (const auto& n : QueryFieldNames()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "did you mean `price`?" for a near miss among names and aliases, or "".
std::string Suggestion(std::string_view name) {
  const std::string lower = ToLower(name.substr(0, 64));
  size_t best = std::numeric_limits<size_t>::max();
  std::string_view best_name;
  auto consider = [&](std::string_view candidate, Field f) {
    const size_t d = EditDistance(lower, candidate);
    if (d < best) {
      best = d;
      best_name = Info(f).name;
    }
  };
  for (const auto& fi : kFields) consider(fi.name, fi.field);
  for (const auto& [alias, f] : kAliases) consider(alias, f);
  if (best <= std::max<size_t>(2, lower.size() / 3)) {
    return " (did you mean `" + std::string(best_name) + "`?)";
  }
  return "";
}

bool Orderable(Field f) { return Info(f).type != FieldType::kVersionList; }

std::string SortFieldList() {
  std::string out;
  for (const auto& n : QueryFieldNames()) {
    if (!Orderable(*FieldFromName(n))) continue;
    out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

// Builds "<head> at column N<tail>" plus the text and a caret line under [pos, pos+len).
Status PointedError(std::string_view text, size_t pos, size_t len, std::string_view head,
                    std::string_view tail = "") {
  const bool utf8 = IsValidUtf8(text);
  size_t column = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    // Count characters, not bytes, so the caret sits under the token in a terminal.
    if (!utf8 || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++column;
  }
  std::string msg = std::string(head) + " at column " + std::to_string(column) + std::string(tail);
  if (text.size() <= kMaxQueryBytes) {
    std::string echo;
    for (char c : text) {
      const auto u = static_cast<unsigned char>(c);
      echo += (u < 0x20 || u == 0x7f || (!utf8 && u >= 0x80)) ? ' ' : c;
    }
    size_t width = 0;  // the token's width in characters
    for (size_t i = pos; i < pos + len && i < text.size(); ++i) {
      if (!utf8 || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++width;
    }
    msg += "\n  " + echo + "\n  " + std::string(column - 1, ' ') + "^" +
           std::string(width > 1 ? width - 1 : 0, '~');
  }
  return Status::InvalidArgument(std::move(msg));
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<Query> Parse() {
    if (text_.size() > kMaxQueryBytes) {
      return PointedError(text_, kMaxQueryBytes, 1,
                          "query is longer than " + std::to_string(kMaxQueryBytes) + " bytes");
    }
    if (size_t bad = FirstInvalidUtf8(text_); bad != std::string_view::npos) {
      return PointedError(text_, bad, 1, "invalid UTF-8");
    }
    Query q;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size()) break;
      auto term = ParseTerm();
      if (!term.ok()) return term.status();
      q.terms.push_back(std::move(term).value());
    }
    return q;
  }

 private:
  struct RawValue {
    std::string text;
    size_t pos;
    size_t len;
  };

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (!AtEnd() && IsSpace(text_[pos_])) ++pos_;
  }
  size_t TokenEnd(size_t from) const {
    size_t e = from;
    while (e < text_.size() && !IsSpace(text_[e])) ++e;
    return e;
  }
  Status Error(size_t pos, size_t len, std::string_view head, std::string_view tail = "") const {
    return PointedError(text_, pos, len, head, tail);
  }

  static bool IdentStart(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  static bool IdentChar(char c) { return IdentStart(c) || IsDigit(c); }

  Result<Term> ParseTerm() {
    const size_t start = pos_;
    while (!AtEnd() && IdentChar(Peek()) && (pos_ > start || IdentStart(Peek()))) ++pos_;
    if (pos_ == start) {
      const size_t end = TokenEnd(start);
      return Error(start, end - start,
                   "expected a field name, got " + Ticked(text_.substr(start, end - start)),
                   "; valid fields: " + FieldList());
    }
    const std::string_view name = text_.substr(start, pos_ - start);
    const std::optional<Field> field = FieldFromName(name);
    if (!field) {
      return Error(start, name.size(), "unknown field " + Ticked(name),
                   Suggestion(name) + "; valid fields: " + FieldList());
    }
    const std::string fname(Info(*field).name);
    const std::string ops_hint = " (=, !=, <, <=, >, >=, in, notin)";

    // Operator: a symbol glued to the field, or the words in/notin after whitespace.
    const size_t op_pos = pos_;
    Op op = Op::kEq;
    size_t op_len = 0;
    bool list = false;
    if (AtEnd() || IsSpace(Peek())) {
      SkipSpace();
      const size_t w = pos_;
      const size_t wend = [&] {
        size_t e = w;
        while (e < text_.size() && IdentChar(text_[e])) ++e;
        return e;
      }();
      const std::string word = ToLower(text_.substr(w, wend - w));
      if ((word == "in" || word == "notin") &&
          (wend >= text_.size() || IsSpace(text_[wend]) || text_[wend] == '[')) {
        op = word == "in" ? Op::kIn : Op::kNotIn;
        pos_ = wend;
        list = true;
        op_len = wend - w;
      } else {
        return Error(start, name.size(),
                     "expected an operator" + ops_hint + " after " + Ticked(name));
      }
    } else {
      const std::string_view rest = text_.substr(pos_);
      struct SymOp {
        std::string_view text;
        Op op;
      };
      static constexpr SymOp kSymOps[] = {{"==", Op::kEq}, {"!=", Op::kNe}, {"<=", Op::kLe},
                                          {">=", Op::kGe}, {"=", Op::kEq},  {"<", Op::kLt},
                                          {">", Op::kGt}};
      for (const auto& s : kSymOps) {
        if (rest.substr(0, s.text.size()) == s.text) {
          op = s.op;
          op_len = s.text.size();
          break;
        }
      }
      if (op_len == 0) {
        const size_t end = TokenEnd(pos_);
        return Error(pos_, end - pos_,
                     "expected an operator" + ops_hint + " after " + Ticked(name) + ", got " +
                         Ticked(text_.substr(pos_, end - pos_)));
      }
      pos_ += op_len;
    }
    const size_t real_op_pos = list ? pos_ - op_len : op_pos;

    if (const FieldType type = Info(*field).type;
        (type == FieldType::kString || type == FieldType::kLabel || type == FieldType::kEnum) &&
        op != Op::kEq && op != Op::kNe && op != Op::kIn && op != Op::kNotIn) {
      return Error(real_op_pos, op_len,
                   Ticked(OpName(op)) + " is not valid for `" + fname + "` (" +
                       TypeDescription(type) + "): use = or !=",
                   " (or in/notin for a list)");
    }

    std::vector<RawValue> values;
    if (list) {
      SkipSpace();
      if (Peek() != '[') {
        const size_t end = TokenEnd(pos_);
        return Error(pos_, std::max<size_t>(1, end - pos_),
                     "expected `[` after `" + std::string(OpName(op)) + "`, like " + fname + " " +
                         std::string(OpName(op)) + " [a,b]");
      }
      const size_t open = pos_++;
      while (true) {
        SkipSpace();
        if (AtEnd()) return Error(open, 1, "missing `]` for the list opened");
        if (Peek() == ']') {
          if (values.empty()) return Error(pos_, 1, "empty list for `" + fname + "`");
          return Error(pos_, 1, "missing list item before `]`");
        }
        auto v = ReadValue(/*in_list=*/true, fname);
        if (!v.ok()) return v.status();
        values.push_back(std::move(v).value());
        SkipSpace();
        if (AtEnd()) return Error(open, 1, "missing `]` for the list opened");
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        if (Peek() == ']') {
          ++pos_;
          break;
        }
        return Error(pos_, 1,
                     "expected `,` or `]` in the list, got " + Ticked(text_.substr(pos_, 1)));
      }
      if (!AtEnd() && !IsSpace(Peek())) {
        return Error(pos_, TokenEnd(pos_) - pos_, "expected whitespace after `]`");
      }
    } else {
      if (AtEnd() || IsSpace(Peek())) {
        return Error(real_op_pos, op_len,
                     "missing value after `" + fname + std::string(OpName(op)) + "`");
      }
      if (Peek() == '[') {
        return Error(pos_, 1, "a list needs `in` or `notin`: write " + fname + " in [a,b]");
      }
      auto v = ReadValue(/*in_list=*/false, fname);
      if (!v.ok()) return v.status();
      values.push_back(std::move(v).value());
    }

    std::vector<std::string> raw;
    raw.reserve(values.size());
    for (const auto& v : values) raw.push_back(v.text);
    auto compiled = Compile(*field, op, raw);
    if (auto* bad = std::get_if<Bad>(&compiled)) {
      const RawValue& v = values[bad->value_index];
      return Error(v.pos, v.len, bad->head, bad->tail);
    }
    Term t = std::get<Term>(std::move(compiled));
    t.column = ColumnOf(start);
    return t;
  }

  Result<RawValue> ReadValue(bool in_list, const std::string& fname) {
    const size_t start = pos_;
    const char q = Peek();
    if (q == '\'' || q == '"') {
      const size_t close = text_.find(q, start + 1);
      if (close == std::string_view::npos) {
        return Error(start, 1, "unterminated quote");
      }
      pos_ = close + 1;
      if (!AtEnd() && !IsSpace(Peek()) && !(in_list && (Peek() == ',' || Peek() == ']'))) {
        return Error(pos_, 1, "expected whitespace after the closing quote");
      }
      return RawValue{std::string(text_.substr(start + 1, close - start - 1)), start,
                      close + 1 - start};
    }
    while (!AtEnd() && !IsSpace(Peek()) && !(in_list && (Peek() == ',' || Peek() == ']'))) ++pos_;
    if (pos_ == start) return Error(start, 1, "missing value for `" + fname + "`");
    return RawValue{std::string(text_.substr(start, pos_ - start)), start, pos_ - start};
  }

  int ColumnOf(size_t pos) const {
    int column = 1;
    for (size_t i = 0; i < pos; ++i) {
      if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) ++column;
    }
    return column;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// How ToString writes a value so that ParseQuery reads back the same text.
std::string Quoted(const std::string& v, bool in_list) {
  bool needs = v.empty() || v[0] == '\'' || v[0] == '"' || v[0] == '[';
  for (char c : v) {
    if (IsSpace(c) || (in_list && (c == ',' || c == ']'))) needs = true;
  }
  if (!needs) return v;
  const char q = v.find('"') == std::string::npos ? '"' : '\'';
  return q + v + q;
}

// <0, 0, >0 on one sort field; `*a_null`/`*b_null` report unknown values.
int CompareField(Field f, const Offer& a, const Offer& b, bool* a_null, bool* b_null) {
  *a_null = *b_null = false;
  switch (Info(f).type) {
    case FieldType::kInt:
    case FieldType::kNumber:
    case FieldType::kEnum: {
      const double x = NumberOf(f, a), y = NumberOf(f, b);
      *a_null = std::isnan(x);
      *b_null = std::isnan(y);
      if (*a_null || *b_null) return 0;
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    case FieldType::kVersion: {
      const std::string_view x = TextOf(f, a), y = TextOf(f, b);
      *a_null = x.empty();
      *b_null = y.empty();
      if (*a_null || *b_null) return 0;
      return VersionCmp(x, y);
    }
    case FieldType::kString:
    case FieldType::kLabel: {
      const std::string_view x = TextOf(f, a), y = TextOf(f, b);
      const size_t n = std::min(x.size(), y.size());
      for (size_t i = 0; i < n; ++i) {
        const auto cx = static_cast<unsigned char>(Lower(x[i]));
        const auto cy = static_cast<unsigned char>(Lower(y[i]));
        if (cx != cy) return cx < cy ? -1 : 1;
      }
      return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    case FieldType::kVersionList:
      return 0;
  }
  return 0;
}

}  // namespace

std::string_view FieldName(Field field) { return Info(field).name; }

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kEq:
      return "=";
    case Op::kNe:
      return "!=";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    case Op::kIn:
      return "in";
    case Op::kNotIn:
      return "notin";
  }
  return "=";
}

FieldType TypeOf(Field field) { return Info(field).type; }

std::optional<Field> FieldFromName(std::string_view name) {
  if (name.size() > 64) return std::nullopt;
  const std::string lower = ToLower(name);
  for (const auto& fi : kFields) {
    if (fi.name == lower) return fi.field;
  }
  for (const auto& [alias, f] : kAliases) {
    if (alias == lower) return f;
  }
  return std::nullopt;
}

std::vector<std::string> QueryFieldNames() {
  std::vector<std::string> out;
  for (const auto& fi : kFields) out.emplace_back(fi.name);
  std::sort(out.begin(), out.end());
  return out;
}

Result<Query> ParseQuery(std::string_view text) { return Parser(text).Parse(); }

Result<Term> MakeTerm(Field field, Op op, const std::vector<std::string>& values) {
  const bool list = op == Op::kIn || op == Op::kNotIn;
  if (values.empty() || (!list && values.size() != 1)) {
    return Status::InvalidArgument(std::string(FieldName(field)) + ": expected " +
                                   (list ? "one or more values" : "exactly one value") + " for " +
                                   std::string(OpName(op)));
  }
  const FieldType type = TypeOf(field);
  if ((type == FieldType::kString || type == FieldType::kLabel || type == FieldType::kEnum) &&
      !list && op != Op::kEq && op != Op::kNe) {
    return Status::InvalidArgument("`" + std::string(OpName(op)) + "` is not valid for `" +
                                   std::string(FieldName(field)) + "` (" + TypeDescription(type) +
                                   "): use = or !=");
  }
  auto compiled = Compile(field, op, values);
  if (auto* bad = std::get_if<Bad>(&compiled)) {
    return Status::InvalidArgument(bad->head + bad->tail);
  }
  return std::get<Term>(std::move(compiled));
}

bool MatchesTerm(const Term& t, const Offer& o) {
  switch (Info(t.field).type) {
    case FieldType::kString: {
      const std::string_view s = TextOf(t.field, o);
      // `node=` names a node by its id or by the name `sluice nodes` shows (issue 13 item 4).
      const std::string_view alias = t.field == Field::kNode ? o.node_name : std::string_view();
      bool any = false;
      for (const std::string& v : t.values) {
        for (std::string_view text : {s, alias}) {
          if (text.empty() && !s.empty()) continue;
          if (t.glob ? GlobMatch(v, text) : EqualsLower(v, text)) any = true;
        }
        if (any) break;
      }
      return any != IsNegated(t.op);
    }
    case FieldType::kLabel: {
      const std::string_view s = o.gpu_label;
      bool any = false;
      for (const std::string& l : t.labels) {
        if (EqualsLower(l, s)) {
          any = true;
          break;
        }
      }
      if (!any && t.glob) {
        for (const std::string& v : t.values) {
          if (HasGlob(v) && GlobMatch(v, s)) {
            any = true;
            break;
          }
        }
      }
      return any != IsNegated(t.op);
    }
    case FieldType::kInt:
    case FieldType::kNumber:
    case FieldType::kEnum: {
      const double x = NumberOf(t.field, o);
      if (std::isnan(x)) return false;
      if (t.op == Op::kIn || t.op == Op::kNotIn) {
        const bool any = std::find(t.numbers.begin(), t.numbers.end(), x) != t.numbers.end();
        return any != (t.op == Op::kNotIn);
      }
      const double v = t.numbers.empty() ? 0 : t.numbers[0];
      return CompareHolds(t.op, x < v ? -1 : (x > v ? 1 : 0));
    }
    case FieldType::kVersion: {
      const std::string_view s = TextOf(t.field, o);
      if (s.empty()) return false;
      return VersionHolds(t, s) != IsNegated(t.op);
    }
    case FieldType::kVersionList: {
      bool any = false;
      for (const std::string& s : ListOf(t.field, o)) {
        if (VersionHolds(t, s)) {
          any = true;
          break;
        }
      }
      return any != IsNegated(t.op);
    }
  }
  return false;
}

bool Matches(const Query& query, const Offer& offer) {
  for (const Term& t : query.terms) {
    if (!MatchesTerm(t, offer)) return false;
  }
  return true;
}

const Term* FindTerm(const Query& query, Field field, Op op) {
  for (const Term& t : query.terms) {
    if (t.field == field && t.op == op) return &t;
  }
  return nullptr;
}

std::string ToString(const Query& query) {
  std::string out;
  for (const Term& t : query.terms) {
    if (!out.empty()) out += ' ';
    out += FieldName(t.field);
    if (t.op == Op::kIn || t.op == Op::kNotIn) {
      out += ' ';
      out += OpName(t.op);
      out += " [";
      for (size_t i = 0; i < t.values.size(); ++i) {
        if (i > 0) out += ',';
        out += Quoted(t.values[i], /*in_list=*/true);
      }
      out += ']';
    } else {
      out += OpName(t.op);
      out += Quoted(t.values.empty() ? std::string() : t.values[0], /*in_list=*/false);
    }
  }
  return out;
}

Result<Query> QueryFromResources(const std::vector<std::string>& gpu_labels,
                                 std::optional<double> min_vram_gb, int gpus, int cpus,
                                 double memory_gb, std::optional<double> max_price_per_hour,
                                 PriceBasis basis) {
  Query q;
  auto add = [&q](Field f, Op op, std::vector<std::string> raw) -> Status {
    auto compiled = Compile(f, op, raw);
    if (auto* bad = std::get_if<Bad>(&compiled)) {
      return Status::InvalidArgument("resources: " + bad->head + bad->tail);
    }
    q.terms.push_back(std::get<Term>(std::move(compiled)));
    return Status::Ok();
  };
  auto bad_number = [](std::string_view what) {
    return Status::InvalidArgument("resources: " + std::string(what) + " is not a finite number");
  };
  if (!gpu_labels.empty()) {
    SLUICE_RETURN_IF_ERROR(
        add(Field::kGpu, gpu_labels.size() == 1 ? Op::kEq : Op::kIn, gpu_labels));
  }
  if (min_vram_gb) {
    if (!std::isfinite(*min_vram_gb)) return bad_number("min_vram_gb");
    if (*min_vram_gb > 0) {
      SLUICE_RETURN_IF_ERROR(add(Field::kVram, Op::kGe, {FormatNumber(*min_vram_gb)}));
    }
  }
  if (gpus > 0) SLUICE_RETURN_IF_ERROR(add(Field::kGpus, Op::kGe, {std::to_string(gpus)}));
  if (cpus > 0) SLUICE_RETURN_IF_ERROR(add(Field::kCpus, Op::kGe, {std::to_string(cpus)}));
  if (!std::isfinite(memory_gb)) return bad_number("memory_gb");
  if (memory_gb > 0) {
    SLUICE_RETURN_IF_ERROR(add(Field::kMemory, Op::kGe, {FormatNumber(memory_gb)}));
  }
  if (max_price_per_hour && !std::isfinite(*max_price_per_hour)) {
    return bad_number("max_price_per_hour");
  }
  const Field price_field = basis == PriceBasis::kInterruptible ? Field::kSpotPrice : Field::kPrice;
  if (max_price_per_hour && gpus > 0 && basis != PriceBasis::kEither) {
    // The job's budget is for all its GPUs; offers are priced per GPU-hour.
    const double per_gpu = *max_price_per_hour / gpus;
    SLUICE_RETURN_IF_ERROR(add(price_field, Op::kLe, {FormatNumber(per_gpu)}));
  } else if (basis == PriceBasis::kInterruptible && gpus > 0) {
    SLUICE_RETURN_IF_ERROR(add(Field::kSpotPrice, Op::kGt, {"0"}));
  }
  return q;
}

Result<std::vector<SortKey>> ParseSortKeys(std::string_view text) {
  if (text.size() > kMaxQueryBytes) {
    return PointedError(text, kMaxQueryBytes, 1, "sort keys longer than 16384 bytes");
  }
  if (size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    return PointedError(text, bad, 1, "invalid UTF-8");
  }
  std::vector<SortKey> keys;
  if (std::all_of(text.begin(), text.end(), IsSpace)) return keys;
  size_t pos = 0;
  while (true) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    size_t b = pos, e = end;
    while (b < e && IsSpace(text[b])) ++b;
    while (e > b && IsSpace(text[e - 1])) --e;
    if (b == e) return PointedError(text, b, 1, "empty sort key");
    SortKey key;
    size_t name_at = b;
    if (text[b] == '-' || text[b] == '+') {
      key.descending = text[b] == '-';
      ++name_at;
    }
    const std::string_view name = text.substr(name_at, e - name_at);
    const std::optional<Field> f = FieldFromName(name);
    if (!f) {
      return PointedError(text, name_at, std::max<size_t>(1, name.size()),
                          "unknown sort field " + Ticked(name),
                          Suggestion(name) + "; valid sort fields: " + SortFieldList());
    }
    if (!Orderable(*f)) {
      return PointedError(text, name_at, name.size(),
                          Ticked(FieldName(*f)) + " holds a list and cannot be sorted on",
                          "; valid sort fields: " + SortFieldList());
    }
    key.field = *f;
    keys.push_back(key);
    if (end == text.size()) break;
    pos = end + 1;
  }
  return keys;
}

bool OfferLess(const std::vector<SortKey>& keys, const Offer& a, const Offer& b) {
  for (const SortKey& k : keys) {
    bool a_null = false, b_null = false;
    int c = CompareField(k.field, a, b, &a_null, &b_null);
    if (a_null || b_null) {
      if (a_null && b_null) continue;
      return b_null;  // unknown values sort last in either direction
    }
    if (k.descending) c = -c;
    if (c != 0) return c < 0;
  }
  return a.id < b.id;
}

}  // namespace sluice::market
