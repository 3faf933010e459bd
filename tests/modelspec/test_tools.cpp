// test_tools.cpp — ds4-gen and ds4-inspect end to end: --list equals the published directories,
// generated files round-trip through the GGUF reader and validate, generation is deterministic
// (same seed → same bytes, known hash of the tensor data), ds4-inspect's output and exit codes.
#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "modelspec/metadata_writer.h"
#include "modelspec/model_file.h"
#include "modelspec/profiles.h"
#include "quant/dequant.h"

namespace ds4::modelspec {
namespace {

namespace fs = std::filesystem;
const std::string kGen = DS4_GEN_BIN;
const std::string kInspect = DS4_INSPECT_BIN;
const std::string kData = DS4_MODELSPEC_TEST_DATA;

struct CmdResult {
  int rc = -1;
  std::string out;
};
CmdResult run(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::vector<std::string> sorted_rows(const std::string& text) {
  std::vector<std::string> rows;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line))
    if (!line.empty() && line[0] != '#') rows.push_back(line);
  std::sort(rows.begin(), rows.end());
  return rows;
}
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string sha256_hex(const uint8_t* p, size_t n) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(p, n, d);
  char hex[2 * SHA256_DIGEST_LENGTH + 1];
  for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) std::snprintf(hex + 2 * i, 3, "%02x", d[i]);
  return hex;
}

class Tools : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ds4_modelspec_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(Tools, ListFlashQ2EqualsPublishedTable) {
  CmdResult r = run(kGen + " --profile flash-q2 --list");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(sorted_rows(r.out), sorted_rows(slurp(kData + "/tensors_q2.tsv")));
}

TEST_F(Tools, ListFlashQ4EqualsPublishedTable) {
  CmdResult r = run(kGen + " --profile flash-q4 --list");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(sorted_rows(r.out), sorted_rows(slurp(kData + "/tensors_q4.tsv")));
}

// FORMATS.md §3.7: the real header and directory with zero tensor data, written as holes. ds4 itself
// would accept it (Flash shape, exact types, special tokens), so loader paths can be tested at full size.
TEST_F(Tools, FullShapeSparseFlashFile) {
  const std::string f = path("flash-zeros.gguf");
  CmdResult r = run(kGen + " --profile flash-q2 --zeros -o " + f);
  ASSERT_EQ(r.rc, 0) << r.out;
  auto file = gguf::File::open(f);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto inv = build_inventory(flash_config(), TypePolicy::q2);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ((*file)->file_size(), (*file)->data_offset() + inv->total_padded_bytes(32));
  EXPECT_EQ((*file)->tensors().size(), 1328u);
  auto rep = check_model_file(**file, TypeRule::ds4);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_TRUE(rep->ok()) << rep->status().to_string();
  EXPECT_TRUE(rep->ds4_compatible) << rep->ds4_reason;
  // Holes: far less disk than the 81 GiB logical size.
  CmdResult du = run("du -k " + f);
  EXPECT_LT(std::stoll(du.out), 64ll * 1024) << du.out;  // < 64 MiB allocated
  CmdResult i = run(kInspect + " --ds4-strict --no-metadata --no-tensors " + f);
  EXPECT_EQ(i.rc, 0) << i.out;
  EXPECT_NE(i.out.find("ds4 (antirez) would accept this file"), std::string::npos) << i.out;
  // Per-type totals of FORMATS.md §3.4 (also matched by a llama.cpp load log of the real file).
  EXPECT_NE(i.out.find("Q8_0\t345 tensors\t6598885376 bytes"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("IQ2_XXS\t86 tensors\t47613739008 bytes"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("all\t1328 tensors\t86714775900 bytes"), std::string::npos) << i.out;
}

TEST_F(Tools, UnknownProfileIsAClearError) {
  CmdResult r = run(kGen + " --profile huge -o " + path("x.gguf"));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("unknown profile 'huge'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("x.gguf")));
}

TEST_F(Tools, TinyRoundTripsAndValidates) {
  CmdResult r = run(kGen + " --profile tiny --seed 7 -o " + path("t.gguf") + " --mtp-out " + path("t-mtp.gguf"));
  ASSERT_EQ(r.rc, 0) << r.out;
  auto f = gguf::File::open(path("t.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto rep = check_model_file(**f);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_TRUE(rep->ok()) << rep->status().to_string();
  EXPECT_FALSE(rep->ds4_compatible);  // tiny shapes: ds4 would refuse, we run it
  const ModelConfig& c = rep->cfg;
  EXPECT_EQ(c.n_layer, 6u);
  EXPECT_EQ(c.compress_ratios, (std::vector<uint32_t>{0, 0, 4, 16, 4, 16}));
  EXPECT_EQ((*f)->tensors().size(), 178u);

  // Values follow the §14.4 scales: norms ≈ 1 ± 0.1, matrices std ≈ 1/sqrt(fan_in), hash rows distinct.
  const auto* norm = (*f)->find_tensor("blk.1.attn_norm.weight");
  const auto* q_a = (*f)->find_tensor("blk.1.attn_q_a.weight");
  const auto* tid = (*f)->find_tensor("blk.0.ffn_gate_tid2eid.weight");
  ASSERT_TRUE(norm && q_a && tid);
  auto stats = [&](const gguf::TensorInfo* t) {
    const float* p = reinterpret_cast<const float*>((*f)->tensor(*t).data);
    double s = 0, s2 = 0;
    const uint64_t n = t->n_elements();
    for (uint64_t i = 0; i < n; ++i) s += p[i], s2 += double(p[i]) * p[i];
    return std::pair<double, double>{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  auto [nm, ns] = stats(norm);
  EXPECT_NEAR(nm, 1.0, 0.05);
  EXPECT_NEAR(ns, 0.1, 0.04);
  auto [qm, qs] = stats(q_a);
  EXPECT_NEAR(qm, 0.0, 0.02);
  EXPECT_NEAR(qs, 1.0 / 8.0, 0.01);  // fan_in 64
  const int32_t* ids = reinterpret_cast<const int32_t*>((*f)->tensor(*tid).data);
  for (int t = 0; t < 512; ++t) {
    std::vector<int32_t> row(ids + 3 * t, ids + 3 * t + 3);
    for (int32_t e : row) ASSERT_TRUE(e >= 0 && e < 8);
    std::sort(row.begin(), row.end());
    ASSERT_TRUE(std::adjacent_find(row.begin(), row.end()) == row.end()) << "token " << t;
  }

  auto mtp = gguf::File::open(path("t-mtp.gguf"));
  ASSERT_TRUE(mtp.ok());
  EXPECT_TRUE(is_mtp_file(**mtp));
  auto mrep = check_mtp_file(c, **mtp);
  EXPECT_TRUE(mrep.ok()) << mrep.status().to_string();
}

// Hash of the data section only: it depends on the generator and the seed, not on the tokenizer
// or metadata writer.
std::string data_hash(const std::string& file) {
  auto f = gguf::File::open(file);
  EXPECT_TRUE(f.ok());
  std::string all = slurp(file);
  const size_t off = (*f)->data_offset();
  return sha256_hex(reinterpret_cast<const uint8_t*>(all.data()) + off, all.size() - off);
}

TEST_F(Tools, DeterministicAcrossRunsAndThreads) {
  ASSERT_EQ(run(kGen + " --profile tiny --seed 1 -o " + path("a.gguf")).rc, 0);
  ASSERT_EQ(run(kGen + " --profile tiny --seed 1 --threads 3 -o " + path("b.gguf")).rc, 0);
  ASSERT_EQ(run(kGen + " --profile tiny --seed 2 -o " + path("c.gguf")).rc, 0);
  EXPECT_EQ(slurp(path("a.gguf")), slurp(path("b.gguf")));
  EXPECT_NE(data_hash(path("a.gguf")), data_hash(path("c.gguf")));
  // Known value: tests/reference golden logits were made from this model; a change here means
  // the generator's bytes changed and the golden files must be regenerated (tests/reference/README.md).
  EXPECT_EQ(data_hash(path("a.gguf")), DS4_TINY_SEED1_DATA_SHA256);
}

TEST_F(Tools, TinyQuantDecodesCloseToItsFloats) {
  ASSERT_EQ(run(kGen + " --profile tiny-quant --seed 3 -o " + path("q.gguf")).rc, 0);
  ASSERT_EQ(run(kGen + " --profile tiny-quant --types f32 --seed 3 -o " + path("f.gguf")).rc, 0);
  auto q = gguf::File::open(path("q.gguf"));
  auto f = gguf::File::open(path("f.gguf"));
  ASSERT_TRUE(q.ok() && f.ok());
  auto rep = check_model_file(**q);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << rep->status().to_string();
  // Same seed and names → the quantized file encodes the f32 file's values.
  for (const char* name : {"blk.0.attn_q_a.weight", "blk.3.ffn_gate_exps.weight", "blk.3.ffn_down_exps.weight"}) {
    const auto* tq = (*q)->find_tensor(name);
    const auto* tf = (*f)->find_tensor(name);
    ASSERT_TRUE(tq && tf) << name;
    const uint64_t n = tf->n_elements();
    std::vector<float> dq(n);
    ASSERT_TRUE(dequantize_row(tq->type, (*q)->tensor(*tq).data, dq.data(), static_cast<int64_t>(n)).ok()) << name;
    const float* ref = reinterpret_cast<const float*>((*f)->tensor(*tf).data);
    double err2 = 0, ref2 = 0;
    for (uint64_t i = 0; i < n; ++i) err2 += double(dq[i] - ref[i]) * (dq[i] - ref[i]), ref2 += double(ref[i]) * ref[i];
    const double rel = std::sqrt(err2 / ref2);
    EXPECT_LT(rel, tq->type == GgmlType::Q8_0 ? 0.02 : 0.6) << name << " " << type_upper_name(tq->type);
  }
}

TEST_F(Tools, InspectPrintsTableAndVerdict) {
  ASSERT_EQ(run(kGen + " --profile tiny --seed 1 -o " + path("t.gguf")).rc, 0);
  CmdResult r = run(kInspect + " " + path("t.gguf"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("deepseek4.block_count\tu32\t6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.3.attn_compressor_ape.weight\tF32\t0\t256,16\t16384"), std::string::npos);
  EXPECT_NE(r.out.find("tokenizer.ggml.tokens\tarray\tstring[512]"), std::string::npos);
  EXPECT_NE(r.out.find("VALID: DeepSeek V4 model, 178 tensors"), std::string::npos);
  EXPECT_NE(r.out.find("ds4 (antirez) would reject this file: deepseek4.block_count: expected 43"), std::string::npos);
  // --ds4-strict turns "ds4 would reject" into a failure.
  CmdResult s = run(kInspect + " --ds4-strict --no-metadata --no-tensors " + path("t.gguf"));
  EXPECT_EQ(s.rc, 1) << s.out;
}

// A file whose tensors do not match its metadata (built with the same writer, one tensor dropped,
// one with wrong dims) must be reported with the tensor names and a non-zero exit.
TEST_F(Tools, InspectRejectsBrokenModel) {
  auto inv = build_inventory(tiny_config(), TypePolicy::f32);
  ASSERT_TRUE(inv.ok());
  gguf::Writer w;
  write_model_metadata(tiny_config(), MetadataOptions{}, w);
  std::vector<gguf::Value> toks;
  for (int i = 0; i < 512; ++i) toks.push_back(gguf::Value::of_string("t" + std::to_string(i)));
  w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, toks);
  for (const auto& e : inv->tensors) {
    if (e.name == "blk.2.indexer.proj.weight") continue;
    auto ne = e.ne;
    if (e.name == "blk.4.attn_kv.weight") ne = {64, 128};
    w.add_tensor({e.name, ne, e.type});
  }
  ASSERT_TRUE(w.write(path("bad.gguf"), nullptr).ok());
  CmdResult r = run(kInspect + " --no-metadata " + path("bad.gguf"));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("INVALID"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.2.indexer.proj.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.4.attn_kv.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokenizer.ggml.merges"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("special token"), std::string::npos) << r.out;

  // Broken metadata: the verdict names the key.
  gguf::Writer w2;
  ModelConfig c = tiny_config();
  c.n_head_kv = 2;
  write_model_metadata(c, MetadataOptions{}, w2);
  ASSERT_TRUE(w2.write(path("bad2.gguf"), nullptr).ok());
  CmdResult r2 = run(kInspect + " --no-metadata " + path("bad2.gguf"));
  EXPECT_EQ(r2.rc, 1) << r2.out;
  EXPECT_NE(r2.out.find("deepseek4.attention.head_count_kv: expected 1"), std::string::npos) << r2.out;

  CmdResult r3 = run(kInspect + " " + path("missing.gguf"));
  EXPECT_EQ(r3.rc, 2) << r3.out;
}

}  // namespace
}  // namespace ds4::modelspec
