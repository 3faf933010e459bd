// test_bad_model.cpp — malformed model files fail Engine::open with a clear error, never a crash:
// a missing tensor, a tensor with wrong dims, an out-of-range hash-routing expert id.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "gguf/gguf.h"
#include "model_fixture.h"

using namespace ds4;

namespace {

// Copies DS4_TINY_GGUF to `dst`, letting `edit` drop (return false) or reshape tensors and patch bytes.
Status rewrite(const std::string& dst, const std::function<bool(gguf::TensorSpec&)>& edit,
               const std::function<void(const std::string&, std::span<uint8_t>)>& patch) {
  DS4_ASSIGN_OR_RETURN(auto in, gguf::File::open(DS4_TINY_GGUF));
  gguf::Writer w;
  for (const auto& kv : in->metadata()) w.add(kv.key, kv.value);
  std::vector<const gguf::TensorInfo*> kept;
  for (const auto& t : in->tensors()) {
    gguf::TensorSpec spec{t.name, t.ne, t.type};
    if (!edit(spec)) continue;
    w.add_tensor(spec);
    kept.push_back(&t);
  }
  const gguf::File* f = in.get();
  return w.write(dst, [&](size_t i, std::span<uint8_t> out) -> Status {
    const auto& t = *kept[i];
    const uint8_t* data = f->tensor(t).data;
    std::memset(out.data(), 0, out.size());
    std::memcpy(out.data(), data, std::min<uint64_t>(out.size(), t.n_bytes));
    patch(t.name, out);
    return Status::Ok();
  });
}

Status open_status(const std::string& path) {
  EngineOptions o;
  o.model_path = path;
  auto e = Engine::open(o);
  return e.ok() ? Status::Ok() : e.status();
}

}  // namespace

TEST(BadModel, MissingTensorIsNamed) {
  const std::string p = std::string(DS4_TEST_TMP) + "/bad-missing.gguf";
  ASSERT_TRUE(rewrite(p, [](gguf::TensorSpec& s) { return s.name != "blk.3.attn_kv.weight"; },
                      [](const std::string&, std::span<uint8_t>) {}).ok());
  const Status st = open_status(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("blk.3.attn_kv.weight"), std::string::npos) << st.to_string();
}

TEST(BadModel, WrongDimsAreRejected) {
  const std::string p = std::string(DS4_TEST_TMP) + "/bad-dims.gguf";
  ASSERT_TRUE(rewrite(p,
                      [](gguf::TensorSpec& s) {
                        if (s.name == "blk.1.attn_q_b.weight") s.ne[1] /= 2;
                        return true;
                      },
                      [](const std::string&, std::span<uint8_t>) {}).ok());
  const Status st = open_status(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("blk.1.attn_q_b.weight"), std::string::npos) << st.to_string();
}

TEST(BadModel, HashRoutingExpertOutOfRange) {
  const std::string p = std::string(DS4_TEST_TMP) + "/bad-tid2eid.gguf";
  ASSERT_TRUE(rewrite(p, [](gguf::TensorSpec&) { return true; },
                      [](const std::string& name, std::span<uint8_t> out) {
                        if (name != "blk.0.ffn_gate_tid2eid.weight") return;
                        const int32_t bad = 99;
                        std::memcpy(out.data() + 4 * 10, &bad, 4);
                      }).ok());
  const Status st = open_status(p);
  EXPECT_EQ(st.code(), StatusCode::invalid_data) << st.to_string();
  EXPECT_NE(st.message().find("tid2eid"), std::string::npos) << st.to_string();
}
