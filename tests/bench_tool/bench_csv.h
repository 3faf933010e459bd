// bench_csv.h — reads a ds4-bench CSV back (header names + numeric rows) and runs the tool, for
// the smoke tests. Test-only helpers; the format itself is defined by tools/ds4-bench/csv.h.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ds4::bench_test {

struct Csv {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> rows;  // rows[i][j] = value of columns[j]
  // Value of a named column in row i; throws std::out_of_range when the column is missing.
  double at(size_t i, const std::string& column) const;
  bool has(const std::string& column) const;
};

// Parses the file; on a malformed file returns false and says why in `error`.
bool read_csv(const std::string& path, Csv& out, std::string& error);

struct RunResult {
  int exit_code = -1;
  std::string stderr_text;
};

// Runs `binary args...` with stdout to /dev/null and stderr captured (each argument shell-quoted).
RunResult run_tool(const std::string& binary, const std::vector<std::string>& args, const std::string& scratch_dir);

}  // namespace ds4::bench_test
