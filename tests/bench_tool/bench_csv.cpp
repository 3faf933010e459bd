// bench_csv.cpp — see bench_csv.h.
#include "bench_csv.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ds4::bench_test {

static std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

double Csv::at(size_t i, const std::string& column) const {
  for (size_t j = 0; j < columns.size(); ++j)
    if (columns[j] == column) return rows.at(i).at(j);
  throw std::out_of_range("no column " + column);
}

bool Csv::has(const std::string& column) const {
  for (const auto& c : columns)
    if (c == column) return true;
  return false;
}

bool read_csv(const std::string& path, Csv& out, std::string& error) {
  std::ifstream f(path);
  if (!f) {
    error = "cannot open " + path;
    return false;
  }
  std::string line;
  if (!std::getline(f, line)) {
    error = "empty file";
    return false;
  }
  out.columns = split(line);
  int n = 1;
  while (std::getline(f, line)) {
    ++n;
    const auto cells = split(line);
    if (cells.size() != out.columns.size()) {
      error = "line " + std::to_string(n) + " has " + std::to_string(cells.size()) + " cells, header has " +
              std::to_string(out.columns.size());
      return false;
    }
    std::vector<double> row;
    for (const auto& c : cells) {
      char* end = nullptr;
      const double v = std::strtod(c.c_str(), &end);
      if (c.empty() || *end != '\0') {
        error = "line " + std::to_string(n) + ": not a number: '" + c + "'";
        return false;
      }
      row.push_back(v);
    }
    out.rows.push_back(std::move(row));
  }
  return true;
}

static std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

RunResult run_tool(const std::string& binary, const std::vector<std::string>& args, const std::string& scratch_dir) {
  const std::string err_path = scratch_dir + "/stderr.txt";
  std::string cmd = quote(binary);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >/dev/null 2>" + quote(err_path);
  RunResult r;
  const int st = std::system(cmd.c_str());
  r.exit_code = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err_path);
  std::ostringstream ss;
  ss << f.rdbuf();
  r.stderr_text = ss.str();
  return r;
}

}  // namespace ds4::bench_test
