// A minimal streaming JSON writer for the library's reports (Session::report_json) and its Chrome
// trace (tiers/trace.cpp). The CLI's --json files are built with nlohmann-json (tools/json_out.h);
// the library keeps this writer because a trace can hold a million events: writing 1M trace events
// took 1.0 s and 222 MiB peak here against nlohmann's ordered_json 3.4 s and 845 MiB (the same
// bytes out; issue 12, point 6).
#pragma once
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace terrace {

class JsonWriter {
 public:
  JsonWriter& begin_object() { sep(); os_ << '{'; first_.push_back(true); return *this; }
  JsonWriter& end_object() { os_ << '}'; first_.pop_back(); return *this; }
  JsonWriter& begin_array() { sep(); os_ << '['; first_.push_back(true); return *this; }
  JsonWriter& end_array() { os_ << ']'; first_.pop_back(); return *this; }
  JsonWriter& key(std::string_view k) { sep(); str(k); os_ << ':'; after_key_ = true; return *this; }
  JsonWriter& value(std::string_view v) { sep(); str(v); return *this; }
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& value(const std::string& v) { return value(std::string_view(v)); }
  JsonWriter& value(bool v) { sep(); os_ << (v ? "true" : "false"); return *this; }
  JsonWriter& value(int64_t v) { sep(); os_ << v; return *this; }
  JsonWriter& value(int v) { return value(int64_t(v)); }
  JsonWriter& value(size_t v) { return value(int64_t(v)); }
  // The shortest text that reads back as exactly `v` (std::to_chars); NaN and infinities, which
  // JSON cannot hold, as null.
  JsonWriter& value(double v) {
    sep();
    if (!std::isfinite(v)) { os_ << "null"; return *this; }
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    os_.write(buf, end - buf);
    return *this;
  }
  JsonWriter& null() { sep(); os_ << "null"; return *this; }
  // Splices an already-serialised JSON value.
  JsonWriter& raw(std::string_view json) { sep(); os_ << json; return *this; }
  template <typename T> JsonWriter& field(std::string_view k, const T& v) { key(k); return value(v); }
  JsonWriter& field(std::string_view k, const std::vector<int64_t>& v) {
    key(k); begin_array(); for (int64_t x : v) value(x); return end_array();
  }
  JsonWriter& field(std::string_view k, const std::vector<std::string>& v) {
    key(k); begin_array(); for (auto& x : v) value(x); return end_array();
  }
  std::string str() const { return os_.str(); }

 private:
  void sep() {
    if (after_key_) { after_key_ = false; return; }
    if (!first_.empty()) { if (!first_.back()) os_ << ','; first_.back() = false; }
  }
  void str(std::string_view s) {
    os_ << '"';
    for (char c : s) {
      switch (c) {
        case '"': os_ << "\\\""; break;
        case '\\': os_ << "\\\\"; break;
        case '\n': os_ << "\\n"; break;
        case '\t': os_ << "\\t"; break;
        case '\r': os_ << "\\r"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            os_ << buf;
          } else {
            os_ << c;
          }
      }
    }
    os_ << '"';
  }
  std::ostringstream os_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace terrace
