// test_inventory.cpp — tensor inventory vs the published directories (spec data/tensors_*.tsv,
// copied into tests/modelspec/data), the tiny shapes of MODEL.md §14.3, and the directory validator.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "modelspec/inventory.h"
#include "modelspec/profiles.h"

namespace ds4::modelspec {
namespace {

// Non-comment rows of a TSV, keeping the first `cols` columns.
std::vector<std::string> tsv_rows(const std::string& path, std::vector<int> keep) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::string> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string x;
    while (std::getline(ss, x, '\t')) f.push_back(x);
    std::string row;
    for (size_t i = 0; i < keep.size(); ++i) row += (i ? "\t" : "") + f.at(keep[i]);
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::string> inventory_rows(const Inventory& inv) {
  std::vector<std::string> rows;
  for (const auto& e : inv.tensors) rows.push_back(tsv_row(e));
  return rows;
}

const std::string kData = DS4_MODELSPEC_TEST_DATA;

TEST(Inventory, FlashQ2EqualsPublishedDirectory) {
  auto inv = build_inventory(flash_config(), TypePolicy::q2);
  ASSERT_TRUE(inv.ok()) << inv.status().to_string();
  auto want = tsv_rows(kData + "/tensors_q2.tsv", {0, 1, 2, 3, 4});
  auto got = inventory_rows(*inv);
  EXPECT_EQ(got.size(), 1328u);
  EXPECT_EQ(got, want);  // same order as the spec listing, too
  EXPECT_EQ(inv->total_bytes(), 86714775900ull);
  EXPECT_EQ(inv->total_padded_bytes(32), 86714777664ull);
}

TEST(Inventory, FlashQ4EqualsPublishedDirectory) {
  auto inv = build_inventory(flash_config(), TypePolicy::q4);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inventory_rows(*inv), tsv_rows(kData + "/tensors_q4.tsv", {0, 1, 2, 3, 4}));
  EXPECT_EQ(inv->total_bytes(), 164628167004ull);
}

TEST(Inventory, FlashMtpEqualsPublishedFile) {
  auto inv = build_mtp_inventory(flash_config(), TypePolicy::q2);
  ASSERT_TRUE(inv.ok());
  // tensors_mtp.tsv: name, type, id, dims, rel_offset, bytes (file order).
  EXPECT_EQ(inventory_rows(*inv), tsv_rows(kData + "/tensors_mtp.tsv", {0, 1, 2, 3, 5}));
  EXPECT_EQ(inv->tensors.size(), 32u);
}

TEST(Inventory, CountsByKind) {
  auto inv = build_inventory(flash_config(), TypePolicy::q2);
  ASSERT_TRUE(inv.ok());
  int bias = 0, tid = 0, comp = 0, idx = 0;
  for (const auto& e : inv->tensors) {
    bias += e.kind == TensorKind::exp_probs_b;
    tid += e.kind == TensorKind::ffn_gate_tid2eid;
    comp += e.kind == TensorKind::attn_compressor_kv;
    idx += e.kind == TensorKind::indexer_proj;
  }
  EXPECT_EQ(bias, 40);
  EXPECT_EQ(tid, 3);
  EXPECT_EQ(comp, 41);
  EXPECT_EQ(idx, 21);
}

TEST(Inventory, TinyShapesOfSpec) {
  auto inv = build_inventory(tiny_config(), TypePolicy::f32);
  ASSERT_TRUE(inv.ok());
  auto dims = [&](const std::string& n) {
    const TensorEntry* e = inv->find(n);
    EXPECT_NE(e, nullptr) << n;
    return e ? e->ne : std::vector<uint64_t>{};
  };
  EXPECT_EQ(dims("blk.3.attn_compressor_ape.weight"), (std::vector<uint64_t>{256, 16}));
  EXPECT_EQ(dims("blk.2.attn_compressor_ape.weight"), (std::vector<uint64_t>{512, 4}));
  EXPECT_EQ(dims("blk.2.indexer_compressor_ape.weight"), (std::vector<uint64_t>{256, 4}));
  EXPECT_EQ(dims("blk.0.ffn_gate_tid2eid.weight"), (std::vector<uint64_t>{3, 512}));
  EXPECT_EQ(inv->find("blk.0.ffn_gate_tid2eid.weight")->type, GgmlType::I32);
  EXPECT_EQ(dims("blk.5.ffn_gate_exps.weight"), (std::vector<uint64_t>{64, 32, 8}));
  EXPECT_EQ(dims("blk.1.attn_output_a.weight"), (std::vector<uint64_t>{512, 64}));
  EXPECT_EQ(dims("blk.1.hc_attn_fn.weight"), (std::vector<uint64_t>{256, 24}));
  EXPECT_EQ(inv->find("blk.3.indexer.proj.weight"), nullptr);
  EXPECT_EQ(inv->find("blk.2.exp_probs_b.bias"), nullptr);
  EXPECT_NE(inv->find("blk.3.exp_probs_b.bias"), nullptr);
  EXPECT_EQ(inv->find("blk.3.ffn_gate_tid2eid.weight"), nullptr);
  for (const auto& e : inv->tensors)
    EXPECT_TRUE(e.type == GgmlType::F32 || e.kind == TensorKind::ffn_gate_tid2eid) << e.name;
  // 6 + 6·23 + 3 bias + 3 tid2eid + 4·4 compressor + 2·6 indexer
  EXPECT_EQ(inv->tensors.size(), 6u + 138u + 3u + 3u + 16u + 12u);
}

TEST(Inventory, F16PolicyKeepsVectorsF32) {
  auto inv = build_inventory(tiny_config(), TypePolicy::f16);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->find("blk.0.attn_q_a.weight")->type, GgmlType::F16);
  EXPECT_EQ(inv->find("blk.0.attn_norm.weight")->type, GgmlType::F32);
  EXPECT_EQ(inv->find("blk.0.ffn_down_exps.weight")->type, GgmlType::F16);
  EXPECT_EQ(inv->find("output_hc_scale.weight")->type, GgmlType::F32);
}

TEST(Inventory, QuantPoliciesNeedFittingDims) {
  auto bad = build_inventory(tiny_config(), TypePolicy::q2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("blocks"), std::string::npos) << bad.status().message();
  for (auto p : {TypePolicy::q2, TypePolicy::q4}) {
    auto inv = build_inventory(tiny_quant_config(), p);
    ASSERT_TRUE(inv.ok()) << inv.status().to_string();
    EXPECT_EQ(inv->find("blk.0.attn_q_a.weight")->type, GgmlType::Q8_0);
    EXPECT_EQ(inv->find("blk.0.ffn_down_exps.weight")->type, p == TypePolicy::q2 ? GgmlType::Q2_K : GgmlType::Q4_K);
  }
}

TEST(Inventory, NamesAndSuffixes) {
  EXPECT_EQ(tensor_name(TensorKind::indexer_attn_q_b, 42), "blk.42.indexer.attn_q_b.weight");
  EXPECT_EQ(tensor_name(TensorKind::exp_probs_b, 3), "blk.3.exp_probs_b.bias");
  EXPECT_EQ(tensor_name(TensorKind::output, 7), "output.weight");
  EXPECT_EQ(mtp_tensor_name(TensorKind::mtp_e_proj), "mtp.0.e_proj.weight");
  EXPECT_EQ(mtp_tensor_name(TensorKind::attn_q_a), "mtp.0.attn_q_a.weight");
}

// ---- validator ----

std::vector<gguf::TensorInfo> directory(const Inventory& inv) {
  std::vector<gguf::TensorInfo> out;
  for (const auto& e : inv.tensors) {
    gguf::TensorInfo t;
    t.name = e.name;
    t.ne = e.ne;
    t.type = e.type;
    t.type_id = static_cast<uint32_t>(e.type);
    t.n_bytes = e.n_bytes;
    out.push_back(t);
  }
  return out;
}

gguf::TensorInfo* find(std::vector<gguf::TensorInfo>& d, const std::string& n) {
  for (auto& t : d)
    if (t.name == n) return &t;
  return nullptr;
}

TEST(Validator, AcceptsGeneratedLayouts) {
  for (auto p : {TypePolicy::f32, TypePolicy::f16}) {
    auto d = directory(*build_inventory(tiny_config(), p));
    auto rep = check_tensors(tiny_config(), d);
    EXPECT_TRUE(rep.ok()) << rep.status().to_string();
  }
  auto q2 = directory(*build_inventory(flash_config(), TypePolicy::q2));
  EXPECT_TRUE(check_tensors(flash_config(), q2, {TypeRule::ds4, false}).ok());
  auto q4 = directory(*build_inventory(flash_config(), TypePolicy::q4));
  EXPECT_TRUE(check_tensors(flash_config(), q4, {TypeRule::ds4, false}).ok());
  auto mtp = directory(*build_mtp_inventory(flash_config(), TypePolicy::q2));
  EXPECT_TRUE(check_tensors(flash_config(), mtp, {TypeRule::ds4, true}).ok());
}

TEST(Validator, ReportsEveryProblemByName) {
  auto d = directory(*build_inventory(tiny_config(), TypePolicy::f32));
  d.erase(std::remove_if(d.begin(), d.end(), [](auto& t) { return t.name == "blk.4.indexer.proj.weight"; }),
          d.end());
  find(d, "blk.1.attn_kv.weight")->ne = {64, 128};
  find(d, "blk.2.attn_q_a.weight")->type = GgmlType::I32;
  find(d, "blk.2.attn_q_a.weight")->type_id = 26;
  auto rep = check_tensors(tiny_config(), d);
  ASSERT_EQ(rep.errors.size(), 3u);
  std::string all;
  for (auto& e : rep.errors) all += e + "\n";
  EXPECT_NE(all.find("'blk.4.indexer.proj.weight'"), std::string::npos) << all;
  EXPECT_NE(all.find("missing"), std::string::npos) << all;
  EXPECT_NE(all.find("'blk.1.attn_kv.weight': expected dims [64, 256], got [64, 128]"), std::string::npos) << all;
  EXPECT_NE(all.find("'blk.2.attn_q_a.weight': type I32 is not allowed"), std::string::npos) << all;
  EXPECT_FALSE(rep.status().ok());
}

TEST(Validator, OptionalBiasAndExtraTensorsAreNotes) {
  auto d = directory(*build_inventory(tiny_config(), TypePolicy::f32));
  d.erase(std::remove_if(d.begin(), d.end(), [](auto& t) { return t.name == "blk.5.exp_probs_b.bias"; }),
          d.end());
  gguf::TensorInfo extra;
  extra.name = "blk.0.something_new.weight";
  extra.ne = {4};
  d.push_back(extra);
  auto rep = check_tensors(tiny_config(), d);
  EXPECT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep.notes.size(), 2u);
}

TEST(Validator, Ds4RuleIsStricterThanEngineRule) {
  auto d = directory(*build_inventory(flash_config(), TypePolicy::f16));
  EXPECT_TRUE(check_tensors(flash_config(), d).ok());
  auto strict = check_tensors(flash_config(), d, {TypeRule::ds4, false});
  EXPECT_FALSE(strict.ok());
  EXPECT_NE(strict.errors.front().find("expected Q8_0"), std::string::npos) << strict.errors.front();
}

TEST(Validator, RoutedGateAndUpMustShareAType) {
  auto d = directory(*build_inventory(flash_config(), TypePolicy::q2));
  auto* up = find(d, "blk.7.ffn_up_exps.weight");
  up->type = GgmlType::Q4_K;
  up->type_id = 12;
  auto rep = check_tensors(flash_config(), d, {TypeRule::ds4, false});
  ASSERT_EQ(rep.errors.size(), 1u);
  EXPECT_NE(rep.errors[0].find("same type"), std::string::npos) << rep.errors[0];
  // ds4 accepts Q4_K / Q2_K / IQ2_XXS for any routed tensor as long as gate == up.
  auto* gate = find(d, "blk.7.ffn_gate_exps.weight");
  gate->type = GgmlType::Q4_K;
  gate->type_id = 12;
  EXPECT_TRUE(check_tensors(flash_config(), d, {TypeRule::ds4, false}).ok());
}

TEST(Validator, MtpFileNeedsRouterBias) {
  auto d = directory(*build_mtp_inventory(tiny_config(), TypePolicy::f32));
  d.erase(std::remove_if(d.begin(), d.end(), [](auto& t) { return t.name == "mtp.0.exp_probs_b.bias"; }),
          d.end());
  auto rep = check_tensors(tiny_config(), d, {TypeRule::engine, true});
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.errors[0].find("mtp.0.exp_probs_b.bias"), std::string::npos);
}

}  // namespace
}  // namespace ds4::modelspec
