// prom_text.h — writing the Prometheus text exposition format: a metric's "# HELP" / "# TYPE"
// header, a whole single-sample metric (header + "name value"), and one sample with one label
// (`name{label="value"} v`, written after its prom_header). Shared by every /metrics renderer so each
// metric costs one line of code.
// Not here: which metrics exist (metrics.cpp, metrics_batch.cpp, disk_cache_view.cpp), or samples
// with several labels (callers write those after prom_header).
#pragma once

#include <concepts>
#include <cstdio>
#include <string>
#include <string_view>

namespace ds4::server {

inline void prom_header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// Doubles with every significant digit (%.17g), so totals round-trip.
inline std::string prom_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

inline void prom_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                        std::string_view value) {
  prom_header(out, name, type, help);
  out += name;
  out += ' ';
  out += value;
  out += '\n';
}

template <std::integral T>
void prom_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help, T value) {
  prom_metric(out, name, type, help, std::string_view(std::to_string(value)));
}

inline void prom_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                        double value) {
  prom_metric(out, name, type, help, std::string_view(prom_number(value)));
}

inline void prom_sample(std::string& out, std::string_view name, std::string_view label,
                        std::string_view label_value, std::string_view value) {
  out += name;
  out += '{';
  out += label;
  out += "=\"";
  out += label_value;
  out += "\"} ";
  out += value;
  out += '\n';
}

template <std::integral T>
void prom_sample(std::string& out, std::string_view name, std::string_view label, std::string_view label_value,
                 T value) {
  prom_sample(out, name, label, label_value, std::string_view(std::to_string(value)));
}

}  // namespace ds4::server
