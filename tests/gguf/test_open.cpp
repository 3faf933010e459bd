// test_open.cpp — File::open over real files: mmap, populate, path errors, and a full-size
// 1328-tensor directory (the real model's tensor count, written sparse).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "gguf/gguf.h"
#include "temp_dir.h"

namespace ds4::gguf {
namespace {

using testing::TempDir;
using testing::write_all;

TEST(GgufOpen, MissingDirectoryAndEmptyFiles) {
  auto missing = File::open("/nonexistent-ds4/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find("/nonexistent-ds4/model.gguf"), std::string::npos);

  TempDir dir;
  auto d = File::open(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos);

  write_all(dir.file("empty.gguf"), {});
  auto e = File::open(dir.file("empty.gguf"));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::invalid_data);
  EXPECT_NE(e.status().message().find("empty.gguf"), std::string::npos);  // errors name the path
  EXPECT_NE(e.status().message().find("gguf: offset 0: truncated"), std::string::npos) << e.status().message();
}

TEST(GgufOpen, PopulateReadsTheSameData) {
  TempDir dir;
  Writer w;
  w.add_string("general.architecture", "deepseek4");
  w.add_tensor({"a", {1024, 64}, GgmlType::F32});
  auto fill = [](size_t, std::span<uint8_t> out) {
    for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<uint8_t>(j * 13);
    return Status::Ok();
  };
  ASSERT_TRUE(w.write(dir.file("m.gguf"), fill).ok());
  for (bool populate : {false, true}) {
    OpenOptions o;
    o.populate = populate;
    auto f = File::open(dir.file("m.gguf"), o);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    auto bytes = (*f)->tensor((*f)->tensors()[0]).bytes();
    ASSERT_EQ(bytes.size(), 1024u * 64u * 4u);
    EXPECT_EQ(bytes[12345], static_cast<uint8_t>(12345 * 13));
    EXPECT_EQ(*(*f)->get_string("general.architecture"), "deepseek4");
  }
}

TEST(GgufOpen, FullSizeDirectoryOf1328Tensors) {
  // The real main file's tensor count with its typical shapes (FORMATS.md §3.4), tensor data as
  // holes: ~10 GB of file, no disk. Reports the open time; speed itself is not asserted here.
  Writer w;
  w.add_string("general.architecture", "deepseek4");
  std::vector<Value> tokens;
  for (int i = 0; i < 129280; ++i) tokens.push_back(Value::of_string("tok" + std::to_string(i)));
  w.add_array("tokenizer.ggml.tokens", ValueType::string, std::move(tokens));
  size_t n = 0;
  const char* names[] = {"attn_q_a.weight", "attn_q_b.weight", "attn_kv.weight", "attn_output_a.weight",
                         "attn_output_b.weight", "attn_norm.weight", "ffn_norm.weight", "hc_attn_fn.weight",
                         "hc_ffn_fn.weight", "ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_shexp.weight",
                         "ffn_up_shexp.weight", "ffn_down_shexp.weight", "attn_sinks.weight",
                         "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                         "attn_q_a_norm.weight", "attn_kv_a_norm.weight", "hc_attn_base.weight",
                         "hc_ffn_base.weight", "hc_attn_scale.weight", "hc_ffn_scale.weight",
                         "compressor_kv.weight", "compressor_gate.weight", "compressor_ape.weight",
                         "compressor_norm.weight", "indexer.attn_q_b.weight", "indexer.proj.weight",
                         "indexer_compressor_kv.weight"};
  for (int layer = 0; n < 1328; ++layer) {
    for (const char* nm : names) {
      if (n == 1328) break;
      std::string name = "blk." + std::to_string(layer) + "." + nm;
      if (std::string(nm).find("_exps") != std::string::npos)
        w.add_tensor({name, {4096, 2048, 16}, GgmlType::IQ2_XXS});
      else if (std::string(nm).find("norm") != std::string::npos || std::string(nm).find("bias") != std::string::npos)
        w.add_tensor({name, {4096}, GgmlType::F32});
      else
        w.add_tensor({name, {1024, 512}, GgmlType::Q8_0});
      ++n;
    }
  }
  TempDir dir;
  const std::string path = dir.file("full.gguf");
  ASSERT_TRUE(w.write(path, nullptr).ok());
  auto t0 = std::chrono::steady_clock::now();
  auto f = File::open(path);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensors().size(), 1328u);
  for (const auto& t : (*f)->tensors()) ASSERT_EQ((*f)->find_tensor(t.name), &t);
  double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  RecordProperty("open_ms", std::to_string(ms));
  std::printf("[ info ] opened %zu tensors + 129280-token vocab (%.1f GB file) in %.2f ms\n",
              (*f)->tensors().size(), (*f)->file_size() / 1e9, ms);
}

}  // namespace
}  // namespace ds4::gguf
