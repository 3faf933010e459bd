// test_planner.cpp — ds4::plan_memory and `ds4 plan` agree with the live accounting of a real run at the
// same (N tokens, K sessions): KV categories exactly, every category and the total within 1%; the CLI
// prints the same numbers as JSON, says whether the plan fits, and rejects bad input with a message.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ds4/engine.h"
#include "ds4/plan.h"

using namespace ds4;

namespace {

std::vector<TokenId> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<TokenId>(rng() % 512);
  return t;
}

// Runs K sessions of N tokens each on a fresh engine and returns its report.
MemoryReport live(int64_t N, int K) {
  EngineOptions o;
  o.model_path = DS4_MEM_TINY_GGUF;
  o.n_threads = 2;
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok());
  std::vector<std::unique_ptr<Session>> s;
  for (int k = 0; k < K; ++k) {
    auto x = (*e)->new_session();
    EXPECT_TRUE(x.ok());
    EXPECT_TRUE((*x)->eval(tokens(static_cast<int>(N), 10 + k)).ok());
    s.push_back(std::move(x).value());
  }
  return (*e)->memory_report();
}

double rel(uint64_t a, uint64_t b) {
  return std::fabs(static_cast<double>(a) - static_cast<double>(b)) / std::max<double>(1.0, static_cast<double>(b));
}

struct Cli {
  int rc = 0;
  std::string out;
};
Cli run_cli(const std::string& args) {
  const std::string cmd = std::string(DS4_CLI_PATH) + " plan " + args + " 2>&1";
  Cli c;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return c;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) c.out.append(buf, n);
  const int st = pclose(p);
  c.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return c;
}

}  // namespace

TEST(Planner, AgreesWithALiveRunWithinOnePercent) {
  for (auto [N, K] : {std::pair<int64_t, int>{64, 1}, {700, 1}, {1100, 2}}) {
    PlanOptions po;
    po.model_path = DS4_MEM_TINY_GGUF;
    po.ctx = N;
    po.sessions = K;
    po.n_threads = 2;
    po.available = uint64_t{1} << 40;
    auto p = plan_memory(po);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    const MemoryReport r = live(N, K);
    const std::string at = " at N=" + std::to_string(N) + " K=" + std::to_string(K);
    for (MemCategory c : {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                          MemCategory::indexer_kv, MemCategory::compressor_state, MemCategory::weights})
      EXPECT_EQ(p->host[c], r.host[c]) << mem_category_name(c) << at;
    EXPECT_LE(rel(p->host[MemCategory::other], r.host[MemCategory::other]), 0.01) << "other" << at;
    EXPECT_LE(rel(p->host.total(), r.host.total()), 0.01)
        << "total" << at << ": plan " << p->host.total() << " live " << r.host.total() << " (scratch plan "
        << p->host[MemCategory::scratch] << " live " << r.host[MemCategory::scratch] << ")";
    EXPECT_EQ(p->device.total(), 0u);
    EXPECT_EQ(p->needed, p->host.total());
  }
}

TEST(Planner, FitsAndLargestContextAndSessions) {
  PlanOptions po;
  po.model_path = DS4_MEM_TINY_GGUF;
  po.ctx = 4096;
  po.sessions = 2;
  po.n_threads = 2;
  po.available = uint64_t{1} << 40;
  auto big = plan_memory(po);
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(big->fits);
  EXPECT_EQ(big->max_ctx_fit, big->model_context);  // 1 TiB holds the tiny model's whole context
  // Plan against exactly what (4096, 2) needs: it fits, one more session does not, and the largest
  // context for two sessions is at least 4096 but below what would need one more block per region.
  po.available = big->needed;
  auto exact = plan_memory(po);
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(exact->fits);
  EXPECT_EQ(exact->max_sessions_fit, 2);
  EXPECT_GE(exact->max_ctx_fit, 4096);
  po.ctx = exact->max_ctx_fit + 1;
  auto over = plan_memory(po);
  ASSERT_TRUE(over.ok());
  EXPECT_FALSE(over->fits);
  po.available = big->needed - 1;
  po.ctx = 4096;
  auto under = plan_memory(po);
  ASSERT_TRUE(under.ok());
  EXPECT_FALSE(under->fits);
  EXPECT_EQ(under->max_sessions_fit, 1);
  EXPECT_LT(under->max_ctx_fit, 4096);
}

TEST(Planner, DefaultChunkFollowsTheBackend) {
  // max_chunk 0 means default_max_chunk(backend) in the engine, `ds4 plan` and ds4-server alike: 64 on the
  // CPU, 512 on CUDA. The chunk sizes each session's raw ring and compressor frontiers, so the CUDA
  // default costs more per session; a plan and a run with the same options must agree on it.
  static_assert(default_max_chunk(BackendKind::cpu) == 64 && default_max_chunk(BackendKind::cuda) == 512);
  PlanOptions po;
  po.model_path = DS4_MEM_TINY_GGUF;
  po.ctx = 1024;
  po.n_threads = 2;
  po.available = uint64_t{1} << 40;
  auto cpu = plan_memory(po);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ(cpu->max_chunk, 64);
  po.backend = BackendKind::cuda;  // planned against the given memory: no GPU needed
  auto cuda = plan_memory(po);
  ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
  EXPECT_EQ(cuda->max_chunk, 512);
  EXPECT_GT(cuda->session[MemCategory::raw_kv], cpu->session[MemCategory::raw_kv]);
  EXPECT_GT(cuda->session[MemCategory::compressor_state], cpu->session[MemCategory::compressor_state]);
  po.max_chunk = 64;  // an explicit chunk wins over the default
  auto cuda64 = plan_memory(po);
  ASSERT_TRUE(cuda64.ok());
  EXPECT_EQ(cuda64->max_chunk, 64);
  EXPECT_EQ(cuda64->session[MemCategory::raw_kv], cpu->session[MemCategory::raw_kv]);

  EngineOptions eo;  // the CPU engine with the default step
  eo.model_path = DS4_MEM_TINY_GGUF;
  eo.n_threads = 2;
  auto e = Engine::open(eo);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->max_step_tokens(), 64);
}

TEST(Planner, CliPrintsTheSamePlanAsJson) {
  const Cli c = run_cli(std::string("-m ") + DS4_MEM_TINY_GGUF + " --ctx 2048 --sessions 3 -t 2 --memory 1T --json");
  ASSERT_EQ(c.rc, 0) << c.out;
  const auto j = nlohmann::json::parse(c.out);
  PlanOptions po;
  po.model_path = DS4_MEM_TINY_GGUF;
  po.ctx = 2048;
  po.sessions = 3;
  po.n_threads = 2;
  po.available = uint64_t{1} << 40;
  auto p = plan_memory(po);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(j["host"]["total"].get<uint64_t>(), p->host.total());
  EXPECT_EQ(j["host"]["compressed_kv_r4"].get<uint64_t>(), p->host[MemCategory::compressed_kv_r4]);
  EXPECT_EQ(j["session"]["indexer_kv"].get<uint64_t>(), p->session[MemCategory::indexer_kv]);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["sessions"].get<int>(), 3);
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token"]["total"].get<double>(), 2 * 256.0 + 2 * 128.0 + 2 * 64.0);
  // The table form names every category and the verdict.
  const Cli t = run_cli(std::string("-m ") + DS4_MEM_TINY_GGUF + " --ctx 2048 --memory 1G");
  ASSERT_EQ(t.rc, 0) << t.out;
  for (const char* s : {"raw_kv", "compressed_kv_r4", "compressed_kv_rhc", "indexer_kv", "compressor_state", "scratch",
                        "weights", "fits: yes", "largest context", "most sessions"})
    EXPECT_NE(t.out.find(s), std::string::npos) << s << "\n" << t.out;
  // Not fitting is exit code 3 with the verdict printed.
  const Cli no = run_cli(std::string("-m ") + DS4_MEM_TINY_GGUF + " --ctx 2048 --memory 100K");
  EXPECT_EQ(no.rc, 3) << no.out;
  EXPECT_NE(no.out.find("fits: NO"), std::string::npos) << no.out;
}

TEST(Planner, CliRejectsBadInputWithAMessage) {
  const std::string m = std::string("-m ") + DS4_MEM_TINY_GGUF;
  for (const char* bad : {" --backend tpu", " --memory lots", " --sessions 0", " --ctx -5", " --ctx 99999999999"}) {
    const Cli c = run_cli(m + bad);
    EXPECT_NE(c.rc, 0) << bad;
    EXPECT_NE(c.out.find("ds4 plan"), std::string::npos) << bad << ": " << c.out;
  }
  const Cli missing = run_cli("-m /nonexistent/model.gguf");
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.out.find("nonexistent"), std::string::npos) << missing.out;
}
