#include "common/json_text.h"

namespace sluice {

namespace {
const std::shared_ptr<const std::string>& NullText() {
  static const auto* text =
      new std::shared_ptr<const std::string>(std::make_shared<const std::string>("null"));
  return *text;
}
}  // namespace

JsonText::JsonText() : text_(NullText()) {}

JsonText::JsonText(const Json& document)
    : text_(document.is_null() ? NullText()
                               : std::make_shared<const std::string>(DumpJson(document))) {}

JsonText JsonText::FromText(std::string text) {
  return JsonText(std::make_shared<const std::string>(std::move(text)));
}

Json JsonText::Parse() const {
  Json out = Json::parse(*text_, nullptr, /*allow_exceptions=*/false);
  return out.is_discarded() ? Json() : out;
}

void to_json(Json& out, const JsonText& text) { out = text.Parse(); }

}  // namespace sluice
