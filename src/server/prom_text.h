// prom_text.h — writing the Prometheus text exposition format: a metric's "# HELP" / "# TYPE"
// header, and a whole single-sample metric (header + "name value"). Shared by every /metrics
// renderer so each metric costs one line of code.
// Not here: which metrics exist (metrics.cpp, metrics_batch.cpp) or labelled samples (callers write
// those after prom_header: the label sets differ per metric).
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

}  // namespace ds4::server
