#pragma once
// Minimal JSON writer for reports (objects, arrays, numbers, strings, booleans), streaming into a string.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace spcg {

class Json {
 public:
  Json& begin_object(const char* key = nullptr) { return open(key, '{'); }
  Json& end_object() { return close('}'); }
  Json& begin_array(const char* key = nullptr) { return open(key, '['); }
  Json& end_array() { return close(']'); }
  Json& kv(const char* key, const std::string& v) { return raw(key, quote(v)); }
  Json& kv(const char* key, const char* v) { return raw(key, quote(v)); }
  Json& kv(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
  Json& kv(const char* key, int v) { return raw(key, std::to_string(v)); }
  Json& kv(const char* key, long v) { return raw(key, std::to_string(v)); }
  Json& kv(const char* key, long long v) { return raw(key, std::to_string(v)); }
  Json& kv(const char* key, double v) { return raw(key, number(v)); }
  Json& value(double v) { return raw(nullptr, number(v)); }
  Json& value(const std::string& v) { return raw(nullptr, quote(v)); }
  const std::string& str() const { return out_; }

  static std::string quote(const std::string& s) {
    std::string r = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') r += '\\', r += c;
      else if (static_cast<unsigned char>(c) < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", c);
        r += b;
      } else r += c;
    }
    return r + "\"";
  }
  static std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    char b[32];
    std::snprintf(b, sizeof b, "%.17g", v);
    return b;
  }

 private:
  Json& open(const char* key, char c) {
    prefix(key);
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  Json& close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  Json& raw(const char* key, const std::string& v) {
    prefix(key);
    out_ += v;
    return *this;
  }
  void prefix(const char* key) {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
    if (key) out_ += quote(key) + ':';
  }
  std::string out_;
  std::vector<bool> first_;
};

}  // namespace spcg
