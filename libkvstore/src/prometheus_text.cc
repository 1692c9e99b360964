#include "kvstore/prometheus_text.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvt {

namespace {

// Escapes a label value or HELP text as the format requires: backslash, newline and (in
// label values) the double quote.
void AppendEscaped(std::string* out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (quote && c == '"') {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

std::string_view TypeName(PrometheusText::Type type) {
  switch (type) {
    case PrometheusText::Type::kCounter:
      return "counter";
    case PrometheusText::Type::kGauge:
      return "gauge";
    case PrometheusText::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string DoubleText(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}

}  // namespace

void PrometheusText::Family(std::string_view name, Type type, std::string_view help) {
  if (!help.empty()) {
    out_.append("# HELP ").append(name).push_back(' ');
    AppendEscaped(&out_, help, /*quote=*/false);
    out_.push_back('\n');
  }
  out_.append("# TYPE ").append(name).append(" ").append(TypeName(type)).push_back('\n');
}

void PrometheusText::Sample(std::string_view name, Labels labels, double value) {
  SampleText(name, labels, DoubleText(value));
}

std::string PrometheusText::BucketBound(double upper_bound) {
  if (std::isinf(upper_bound)) return "+Inf";
  return absl::StrFormat("%g", upper_bound);
}

std::string PrometheusText::SignedText(int64_t v) { return absl::StrCat(v); }
std::string PrometheusText::UnsignedText(uint64_t v) { return absl::StrCat(v); }

void PrometheusText::SampleText(std::string_view name, Labels labels, std::string_view value) {
  out_.append(name);
  if (labels.size() > 0) {
    out_.push_back('{');
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out_.push_back(',');
      first = false;
      out_.append(k).append("=\"");
      AppendEscaped(&out_, v, /*quote=*/true);
      out_.push_back('"');
    }
    out_.push_back('}');
  }
  out_.append(" ").append(value).push_back('\n');
}

}  // namespace kvt
