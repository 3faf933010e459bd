// temp_dir.h — the one scratch-folder helper of the tests: a fresh folder under the system temp
// dir (mkdtemp, so parallel ctest runs and processes never share one), removed with its contents
// when the object goes away. Header-only; include it as "../common/temp_dir.h".
// Not here: reading or writing files (each test folder knows its own formats), nor keeping the
// folder for inspection (copy what you need before the object dies).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace ds4::test_util {

class TempDir {
 public:
  // `prefix` names the folder (ds4_<area>_XXXXXX) so a leftover says which tests made it.
  explicit TempDir(const std::string& prefix = "ds4_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty when the folder could not be made.
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Names of the entries, in directory order (e.g. to check that no temp file was left behind).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(path_, ec)) out.push_back(e.path().filename().string());
    return out;
  }
  std::vector<std::string> names_with(const std::string& suffix) const {
    std::vector<std::string> out;
    for (auto& n : names())
      if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        out.push_back(n);
    return out;
  }

 private:
  std::string path_;
};

}  // namespace ds4::test_util
