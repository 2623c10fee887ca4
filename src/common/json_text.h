// A JSON document held as its compact text, shared by every copy (issue 12 item 4;
// docs/design-notes.md, "Server memory per node"). A node record keeps its probe's inventory and
// its last conformance report for views, audits and the next hello; as nlohmann DOMs these cost
// ~15 KiB per node (a heap node per value) and were deep-copied on every staged node edit. As
// text they cost their length, once, and a copy is a reference count. Reading one parses it, which
// only views and the rare trust decisions do.
#pragma once

#include <memory>
#include <string>

#include "common/json.h"

namespace sluice {

class JsonText {
 public:
  JsonText();  // null
  // Implicit: records are filled from documents (`record.inventory = ToJson(inventory)`).
  JsonText(const Json& document);  // NOLINT(google-explicit-constructor)
  // `text` must be JSON this class or DumpJson wrote; the store checks what it reads.
  static JsonText FromText(std::string text);

  const std::string& text() const { return *text_; }
  // The document. Text made by this class always parses; anything else reads as null.
  Json Parse() const;

  // Same text, same document (keys are kept sorted, so equal documents dump alike).
  bool operator==(const JsonText& other) const {
    return text_ == other.text_ || *text_ == *other.text_;
  }

 private:
  explicit JsonText(std::shared_ptr<const std::string> text) : text_(std::move(text)) {}
  std::shared_ptr<const std::string> text_;
};

// Lets a JsonText sit inside a document being built (`{{"inventory", record.inventory}}`).
void to_json(Json& out, const JsonText& text);

}  // namespace sluice
