#include "spec/yaml_reader.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "common/text.h"

namespace sluice::spec {

namespace {

std::string Where(std::string_view filename, SpecPos pos) {
  std::string out(filename);
  if (pos.line > 0) out += ":" + std::to_string(pos.line) + ":" + std::to_string(pos.col);
  return out;
}

// Line/column (1-based, column in bytes) of byte `offset`.
SpecPos PosOfOffset(std::string_view text, size_t offset) {
  SpecPos pos{1, 1};
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++pos.line;
      line_start = i + 1;
    }
  }
  pos.col = static_cast<int>(offset - line_start) + 1;
  return pos;
}

SpecPos FromMark(const YAML::Mark& m) {
  if (m.is_null() || m.line < 0) return {};
  return {m.line + 1, m.column + 1};
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Scalar typing follows the YAML 1.2 core schema, which is what users expect from `gpus: 2`
// (a number) versus `gpus: "2"` (a string).
SpecValue::Kind ClassifyPlain(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    return SpecValue::Kind::kNull;
  }
  if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE") {
    return SpecValue::Kind::kBool;
  }
  size_t i = 0;
  if (s[i] == '+' || s[i] == '-') ++i;
  std::string_view rest(s.data() + i, s.size() - i);
  if (rest == ".inf" || rest == ".Inf" || rest == ".INF") return SpecValue::Kind::kNumber;
  if (i == 0 && (s == ".nan" || s == ".NaN" || s == ".NAN")) return SpecValue::Kind::kNumber;
  size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  }
  if (digits == 0) return SpecValue::Kind::kString;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return SpecValue::Kind::kString;
  }
  return i == s.size() ? SpecValue::Kind::kNumber : SpecValue::Kind::kString;
}

// Thrown from inside yaml-cpp's callbacks to stop parsing; caught in ReadYaml, never escapes.
struct AbortBuild {
  std::string message;
  SpecPos pos;
};

class TreeBuilder : public YAML::EventHandler {
 public:
  SpecValue root;
  bool have_root = false;

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      throw AbortBuild{"a job spec is a single YAML document; found another one", FromMark(mark)};
    }
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    SpecValue v;
    v.pos = FromMark(mark);
    Add(std::move(v));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    // Aliases are how "billion laughs" inputs grow; a job spec never needs them.
    throw AbortBuild{"YAML aliases (*name) are not allowed in a job spec", FromMark(mark)};
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                const std::string& value) override {
    SpecValue v;
    v.pos = FromMark(mark);
    v.text = value;
    const bool quoted = tag == "!";
    const bool str_tag = tag == "tag:yaml.org,2002:str" || tag == "!!str";
    v.kind = (quoted || str_tag) ? SpecValue::Kind::kString : ClassifyPlain(value);
    if (v.kind == SpecValue::Kind::kNull) v.text.clear();
    Add(std::move(v));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    SpecValue v;
    v.kind = SpecValue::Kind::kSeq;
    v.pos = FromMark(mark);
    stack_.push_back(Frame{Add(std::move(v)), true, {}});
  }
  void OnSequenceEnd() override { stack_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    SpecValue v;
    v.kind = SpecValue::Kind::kMap;
    v.pos = FromMark(mark);
    stack_.push_back(Frame{Add(std::move(v)), true, {}});
  }
  void OnMapEnd() override { stack_.pop_back(); }

 private:
  struct Frame {
    SpecValue* node;
    bool want_key = true;
    SpecKey key;
  };

  // Attaches `v` to the open collection (or makes it the root). Pointers on stack_ stay valid:
  // only the innermost open node's vectors grow, and nothing on the stack lives inside them.
  SpecValue* Add(SpecValue v) {
    // A valid spec has a few hundred nodes (env is capped at kMaxEnvEntries); stopping early
    // keeps a 1 MiB body of tiny nodes from costing yaml-cpp seconds.
    if (++nodes_ > kMaxYamlNodes) {
      throw AbortBuild{
          "more than " + std::to_string(kMaxYamlNodes) + " values; a job spec is much smaller",
          v.pos};
    }
    if (stack_.empty()) {
      root = std::move(v);
      have_root = true;
      return &root;
    }
    Frame& f = stack_.back();
    if (f.node->kind == SpecValue::Kind::kSeq) {
      f.node->items.push_back(std::move(v));
      return &f.node->items.back();
    }
    if (f.want_key) {
      if (v.kind == SpecValue::Kind::kMap || v.kind == SpecValue::Kind::kSeq) {
        throw AbortBuild{"mapping keys must be plain scalars", v.pos};
      }
      f.key = SpecKey{v.text, v.pos};
      f.want_key = false;
      return nullptr;
    }
    f.want_key = true;
    f.node->entries.emplace_back(std::move(f.key), std::move(v));
    return &f.node->entries.back().second;
  }

  int documents_ = 0;
  int nodes_ = 0;
  std::vector<Frame> stack_;
};

}  // namespace

SpecPos FindExcessiveNesting(std::string_view text, int limit) {
  enum class Mode { kNormal, kSingle, kDouble, kBlockScalar };
  Mode mode = Mode::kNormal;
  int flow = 0;              // open flow brackets
  int block_depth = 0;       // depth contributed by the current block line
  int scalar_indent = -1;    // block scalar content must be indented more than this
  std::vector<int> indents;  // open block indentation levels
  int line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    ++line_no;
    size_t i = 0;
    while (i < line.size() && line[i] == ' ') ++i;
    const bool blank = i == line.size() || std::all_of(line.begin() + i, line.end(), IsSpace);
    if (mode == Mode::kBlockScalar) {
      if (blank || static_cast<int>(i) > scalar_indent) {
        start = end + 1;
        continue;
      }
      mode = Mode::kNormal;
    }
    bool value_start = false;
    int owner_col = static_cast<int>(i);
    if (mode == Mode::kNormal && flow == 0) {
      if (blank || line[i] == '#') {
        start = end + 1;
        continue;
      }
      if (line.substr(i, 3) == "---" || line.substr(i, 3) == "...") indents.clear();
      while (!indents.empty() && indents.back() > static_cast<int>(i)) indents.pop_back();
      if (indents.empty() || indents.back() < static_cast<int>(i)) {
        indents.push_back(static_cast<int>(i));
      }
      block_depth = static_cast<int>(indents.size());
      value_start = true;
    } else {
      i = 0;
    }
    char prev = ' ';
    for (; i < line.size(); ++i) {
      const char c = line[i];
      if (mode == Mode::kDouble) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          mode = Mode::kNormal;
        }
        prev = c;
        continue;
      }
      if (mode == Mode::kSingle) {
        if (c == '\'') {
          if (i + 1 < line.size() && line[i + 1] == '\'') {
            ++i;
          } else {
            mode = Mode::kNormal;
          }
        }
        prev = c;
        continue;
      }
      const bool after_sep =
          IsSpace(prev) || prev == '[' || prev == '{' || prev == ',' || prev == ':';
      if (c == '#' && IsSpace(prev)) break;  // comment
      if (flow > 0) {
        if (c == '[' || c == '{') {
          ++flow;
        } else if (c == ']' || c == '}') {
          if (flow > 0) --flow;
        } else if (c == '"' && after_sep) {
          mode = Mode::kDouble;
        } else if (c == '\'' && after_sep) {
          mode = Mode::kSingle;
        }
      } else if (value_start) {
        if (IsSpace(c)) {
          // keep looking for the value
        } else if ((c == '-' || c == '?') && (i + 1 == line.size() || IsSpace(line[i + 1]))) {
          ++block_depth;  // "- - x" nests on one line
          owner_col = static_cast<int>(i);
        } else if (c == '[' || c == '{') {
          ++flow;
          value_start = false;
        } else if (c == '"') {
          mode = Mode::kDouble;
          value_start = false;
        } else if (c == '\'') {
          mode = Mode::kSingle;
          value_start = false;
        } else if (c == '|' || c == '>') {
          mode = Mode::kBlockScalar;
          scalar_indent = owner_col;
          break;
        } else if (c == '&' || c == '!') {
          while (i + 1 < line.size() && !IsSpace(line[i + 1])) ++i;  // anchor or tag
        } else {
          owner_col = static_cast<int>(i);
          value_start = false;
        }
      } else if (c == ':' && (i + 1 == line.size() || IsSpace(line[i + 1]))) {
        value_start = true;  // "key: value" — the value may open a flow collection
      }
      prev = c;
      if (block_depth + flow > limit) return {line_no, static_cast<int>(i) + 1};
    }
    if (block_depth + flow > limit) return {line_no, 1};
    if (end == text.size()) break;
    start = end + 1;
  }
  return {};
}

Result<SpecValue> ReadYaml(std::string_view text, std::string_view filename) {
  if (size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    static constexpr char kHex[] = "0123456789abcdef";
    const auto b = static_cast<unsigned char>(text[bad]);
    return Status::InvalidArgument(Where(filename, PosOfOffset(text, bad)) +
                                   ": invalid UTF-8 byte 0x" + kHex[b >> 4] + kHex[b & 15] +
                                   "; a job spec must be UTF-8 text");
  }
  if (SpecPos deep = FindExcessiveNesting(text, kMaxYamlDepth); deep.line > 0) {
    return Status::InvalidArgument(Where(filename, deep) + ": nesting deeper than " +
                                   std::to_string(kMaxYamlDepth) + " levels");
  }
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    TreeBuilder builder;
    while (parser.HandleNextDocument(builder)) {
    }
    if (!builder.have_root) {
      return Status::InvalidArgument(std::string(filename) + ": the spec is empty");
    }
    return std::move(builder.root);
  } catch (const AbortBuild& e) {
    return Status::InvalidArgument(Where(filename, e.pos) + ": " + EscapeControl(e.message));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(Where(filename, FromMark(e.mark)) +
                                   ": invalid YAML: " + EscapeControl(e.msg));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string(filename) +
                                   ": cannot parse YAML: " + EscapeControl(e.what()));
  }
}

}  // namespace sluice::spec
