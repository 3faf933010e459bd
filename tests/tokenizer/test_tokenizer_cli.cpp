// test_tokenizer_cli.cpp — `ds4 tokenize` / `ds4 detokenize` end to end: GGUF files holding only
// tokenizer metadata (the real V4 table and the tiny vocab) are written with gguf::Writer, then the
// real ds4 binary runs as a child process; stdout must hold exactly the ids / bytes, errors must go
// to stderr with a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "full_vocab.h"
#include "gguf/gguf.h"

namespace ds4::tokenizer {
namespace {

namespace fs = std::filesystem;
using testing::full_vocab;
using testing::read_all;

struct CliRun {
  int status = -1;
  std::string out, err;
};

// Runs `ds4 <args>` through the shell with stdin from `input`.
CliRun run_ds4(const std::string& args, const std::string& input = "") {
  static int counter = 0;
  const fs::path dir = fs::temp_directory_path() / ("ds4_tok_cli_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string base = (dir / std::to_string(counter++)).string();
  std::ofstream(base + ".in", std::ios::binary) << input;
  const std::string cmd = std::string("'") + DS4_CLI + "' " + args + " < '" + base + ".in' > '" + base +
                          ".out' 2> '" + base + ".err'";
  CliRun r;
  const int st = std::system(cmd.c_str());
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_all(base + ".out");
  r.err = read_all(base + ".err");
  return r;
}

class TokenizerCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ds4_tok_cli_models_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    auto write = [](const TokenizerData& d, const fs::path& p) {
      gguf::Writer w;
      w.add_string("general.architecture", "deepseek4");
      write_tokenizer_metadata(d, w);
      ASSERT_TRUE(w.write(p.string(), [](size_t, std::span<uint8_t>) { return Status::Ok(); }).ok());
    };
    if (const auto* v = full_vocab()) write(v->data, dir_ / "full.gguf");
    auto small = make_small_vocab();
    ASSERT_TRUE(small.ok());
    write(*small, dir_ / "tiny.gguf");
    gguf::Writer w;
    w.add_string("general.architecture", "deepseek4");
    ASSERT_TRUE(w.write((dir_ / "notok.gguf").string(), [](size_t, std::span<uint8_t>) { return Status::Ok(); }).ok());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model(const char* name) { return "-m '" + (dir_ / name).string() + "'"; }
  static fs::path dir_;
};
fs::path TokenizerCli::dir_;

TEST_F(TokenizerCli, TokenizePrintsIdsOnly) {
  ASSERT_NE(full_vocab(), nullptr);
  CliRun r = run_ds4("tokenize " + model("full.gguf") + " -p 'Hello, world!'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "19923\n14\n2058\n3\n");
  // Plain text: special strings are ordinary text; --special makes them single ids.
  r = run_ds4("tokenize " + model("full.gguf") + " -p '<think>'");
  EXPECT_EQ(r.out, "30\n37947\n32\n");
  r = run_ds4("tokenize " + model("full.gguf") + " --special -p '<｜User｜>Hello<｜Assistant｜></think>'");
  EXPECT_EQ(r.out, "128803\n19923\n128804\n128822\n");
  r = run_ds4("tokenize " + model("full.gguf") + " --special -p '<｜latest_reminder｜>'");
  EXPECT_NE(r.out, "128828\n");  // not in the ds4 set
  r = run_ds4("tokenize " + model("full.gguf") + " --special --special-set all -p '<｜latest_reminder｜>'");
  EXPECT_EQ(r.out, "128828\n");
  r = run_ds4("tokenize " + model("full.gguf") + " --bos -p Hello");
  EXPECT_EQ(r.out, "0\n19923\n");
}

TEST_F(TokenizerCli, TokenizeFileAndStdin) {
  ASSERT_NE(full_vocab(), nullptr);
  const std::string text = "for (int i = 0; i < 10; i++) {\n  printf(\"%d\\n\", i);\n}\n";
  const fs::path f = dir_ / "input.txt";
  std::ofstream(f, std::ios::binary) << text;
  const std::string expected =
      "2251\n343\n650\n1008\n438\n223\n18\n29\n1008\n818\n223\n553\n29\n1008\n9661\n875\n223\n13128\n13692\n70\n"
      "5809\n1760\n1008\n833\n1778\n";
  CliRun r = run_ds4("tokenize " + model("full.gguf") + " --file '" + f.string() + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  r = run_ds4("tokenize " + model("full.gguf"), text);
  EXPECT_EQ(r.out, expected);
}

TEST_F(TokenizerCli, DetokenizeRoundTrip) {
  ASSERT_NE(full_vocab(), nullptr);
  const std::string text = "Perché sì… «virgolette» 🦙\n\tend <｜User｜>";
  CliRun t = run_ds4("tokenize " + model("full.gguf") + " --special --special-set all", text);
  ASSERT_EQ(t.status, 0) << t.err;
  CliRun d = run_ds4("detokenize " + model("full.gguf"), t.out);
  EXPECT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(d.out, text);
  // Spaces, CRLF and blank lines around ids are tolerated.
  d = run_ds4("detokenize " + model("full.gguf"), "  19923 \r\n\n14\n");
  EXPECT_EQ(d.out, "Hello,");
  // The tiny vocab round-trips arbitrary bytes.
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(char(b));
  t = run_ds4("tokenize " + model("tiny.gguf"), bytes);
  ASSERT_EQ(t.status, 0) << t.err;
  d = run_ds4("detokenize " + model("tiny.gguf"), t.out);
  EXPECT_EQ(d.out, bytes);
}

TEST_F(TokenizerCli, ErrorsGoToStderrWithNonZeroExit) {
  CliRun r = run_ds4("tokenize -m /nonexistent/model.gguf -p hi");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  r = run_ds4("tokenize " + model("notok.gguf") + " -p hi");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("tokenizer.ggml.tokens"), std::string::npos) << r.err;
  r = run_ds4("tokenize " + model("tiny.gguf") + " -p hi --file /etc/hostname");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  r = run_ds4("tokenize " + model("tiny.gguf") + " --file /nonexistent/input");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  r = run_ds4("tokenize -p hi");  // -m is required
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  r = run_ds4("tokenize " + model("tiny.gguf") + " --special --special-set nope -p hi");
  EXPECT_NE(r.status, 0);
  for (const char* bad : {"12\nabc\n", "-1\n", "512\n", "99999999999999999999\n", "1 2\n"}) {
    r = run_ds4("detokenize " + model("tiny.gguf"), bad);
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_EQ(r.out, "") << bad;
    EXPECT_NE(r.err.find("line"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace ds4::tokenizer
