// One writer of the Prometheus text exposition format (version 0.0.4,
// https://prometheus.io/docs/instrumenting/exposition_formats/), used by kvtierd's
// /metrics and kvtier-llama-server's /metrics, so every endpoint escapes labels, formats
// numbers and groups families the same way.
#ifndef KVSTORE_PROMETHEUS_TEXT_H_
#define KVSTORE_PROMETHEUS_TEXT_H_

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace kvt {

// Builds one scrape's text. Write each family's samples right after its Family() line
// (the format wants a family's samples together). Not thread-safe (one scrape, one writer).
class PrometheusText {
 public:
  enum class Type : uint8_t { kCounter, kGauge, kHistogram };
  // Label name and value; values are escaped (\\, \", \n), names are the caller's
  // ([a-zA-Z_][a-zA-Z0-9_]*).
  using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

  // "# HELP name help" (when `help` is not empty; escaped) and "# TYPE name type".
  void Family(std::string_view name, Type type, std::string_view help = "");

  // One sample line "name{labels} value". Integers are written exactly; floating point
  // with 17 significant digits, NaN as "NaN" and infinities as "+Inf"/"-Inf".
  template <typename T>
  requires std::integral<T>
  void Sample(std::string_view name, Labels labels, T value) {
    if constexpr (std::signed_integral<T>) {
      SampleText(name, labels, SignedText(static_cast<int64_t>(value)));
    } else {
      SampleText(name, labels, UnsignedText(static_cast<uint64_t>(value)));
    }
  }
  void Sample(std::string_view name, Labels labels, double value);
  template <typename T>
  void Sample(std::string_view name, T value) {
    Sample(name, {}, value);
  }

  // The text so far.
  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

  // "le" label value of a histogram bucket bound: as "%g" writes it, "+Inf" for infinity.
  static std::string BucketBound(double upper_bound);

 private:
  static std::string SignedText(int64_t v);
  static std::string UnsignedText(uint64_t v);
  void SampleText(std::string_view name, Labels labels, std::string_view value);

  std::string out_;
};

}  // namespace kvt

#endif  // KVSTORE_PROMETHEUS_TEXT_H_
