#include "market/job_market.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "market/explain.h"
#include "spec/job_spec.h"

namespace sluice::market {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

spec::JobSpec Spec(const std::string& yaml) {
  auto r = spec::ParseJobSpecYaml(yaml, "job.yaml");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : spec::JobSpec{};
}

market::Query Runtime(const std::string& runtime_yaml) {
  auto q = CompileRuntime(Spec("run: x\nruntime: " + runtime_yaml + "\n").runtime);
  EXPECT_TRUE(q.ok()) << q.status().message();
  return q.ok() ? *q : market::Query{};
}

// A node with one A100, the software facts an agent verifies, and nothing else of note.
market::Offer Node(std::string id, std::string driver, std::string cuda,
                   std::vector<std::string> torch, std::string python) {
  market::Offer o;
  o.id = id;
  o.provider = "home";
  o.node = std::move(id);
  o.gpu_label = "a100-80gb";
  o.gpu_model = "a100";
  o.gpus = o.gpus_available = 1;
  o.vram_gb = 80;
  o.cpus = 16;
  o.memory_gb = 128;
  o.price_per_gpu_hour = 1.5;
  o.driver_version = std::move(driver);
  o.cuda_version = std::move(cuda);
  o.torch_builds = std::move(torch);
  o.python_version = std::move(python);
  return o;
}

// The ids of `offers` that satisfy `q`, in order.
std::vector<std::string> Accepted(const market::Query& q,
                                  const std::vector<market::Offer>& offers) {
  std::vector<std::string> ids;
  for (const auto& o : offers) {
    if (market::Matches(q, o)) ids.push_back(o.id);
  }
  return ids;
}

constexpr char kContract[] =
    "{cuda: \"12.1\", driver: \">=535\", torch: \"2.1.0+cu121\", python: \"3.10\"}";

TEST(CompileRuntime, OneTermPerFactInContractOrder) {
  EXPECT_EQ(market::ToString(Runtime(kContract)),
            "cuda>=12.1 driver>=535 torch=2.1.0+cu121 python=3.10");
  EXPECT_TRUE(Runtime("{}").terms.empty());
  EXPECT_EQ(market::ToString(Runtime("{python: \">=3.9\", cuda: \"<12.4\"}")),
            "cuda<12.4 python>=3.9");
  // A bare driver version is a prefix on dotted parts, which `driver=` alone is not.
  EXPECT_EQ(market::ToString(Runtime("{driver: \"535.104\"}")), "driver in [535.104,535.104.*]");
  EXPECT_EQ(market::ToString(Runtime("{driver: \"=535\"}")), "driver in [535,535.*]");
  // The compiled text is valid query language: what `sluice offers` takes.
  const market::Query q = Runtime(kContract);
  auto reparsed = market::ParseQuery(market::ToString(q));
  ASSERT_TRUE(reparsed.ok()) << reparsed.status().message();
  EXPECT_EQ(*reparsed, q);
}

TEST(CompileRuntime, AcceptsAndRejectsOffersByTheirSoftwareFacts) {
  const std::vector<market::Offer> offers = {
      Node("ok", "535.104.05", "12.2", {"2.1.0+cu121"}, "3.10.12"),
      Node("ok-newer", "550.54.15", "12.4", {"2.3.0+cu124", "2.1.0+cu121"}, "3.10.4"),
      Node("old-driver", "525.147.05", "12.2", {"2.1.0+cu121"}, "3.10.12"),
      Node("old-cuda", "535.54.03", "12.0", {"2.1.0+cu121"}, "3.10.12"),
      Node("other-torch-build", "535.104.05", "12.2", {"2.1.0+cu118"}, "3.10.12"),
      Node("no-torch", "535.104.05", "12.2", {}, "3.10.12"),
      Node("python-3.1", "535.104.05", "12.2", {"2.1.0+cu121"}, "3.1.4"),
      Node("python-3.11", "535.104.05", "12.2", {"2.1.0+cu121"}, "3.11.2"),
      Node("unknown-facts", "", "", {}, ""),
  };
  EXPECT_THAT(Accepted(Runtime(kContract), offers), ElementsAre("ok", "ok-newer"));
  // A bare torch version matches any local build of it.
  EXPECT_THAT(Accepted(Runtime("{torch: \"2.1.0\"}"), offers),
              ElementsAre("ok", "ok-newer", "old-driver", "old-cuda", "other-torch-build",
                          "python-3.1", "python-3.11"));
  // cuda is a minimum; the same version with `=` is exact.
  EXPECT_THAT(Accepted(Runtime("{cuda: \"12.2\"}"), offers),
              ElementsAre("ok", "ok-newer", "old-driver", "other-torch-build", "no-torch",
                          "python-3.1", "python-3.11"));
  EXPECT_THAT(Accepted(Runtime("{cuda: \"=12.0\"}"), offers), ElementsAre("old-cuda"));
  // A bare driver is the series: 535 is 535.x, 535.104 is 535.104 and 535.104.y.
  EXPECT_THAT(Accepted(Runtime("{driver: \"535.54\"}"), offers), ElementsAre("old-cuda"));
  EXPECT_THAT(Accepted(Runtime("{driver: \"535\"}"),
                       {Node("a", "535", "", {}, ""), Node("b", "535.104.05", "", {}, ""),
                        Node("c", "5350.1", "", {}, ""), Node("d", "536.1", "", {}, "")}),
              ElementsAre("a", "b"));
  EXPECT_THAT(Accepted(Runtime("{driver: \"<535\"}"), offers), ElementsAre("old-driver"));
  // python at the precision written.
  EXPECT_THAT(Accepted(Runtime("{python: \"3.1\"}"), offers), ElementsAre("python-3.1"));
  EXPECT_THAT(Accepted(Runtime("{python: \">=3.11\"}"), offers), ElementsAre("python-3.11"));
}

TEST(CompileJob, ResourcesThenRuntimeInOneQuery) {
  auto req = CompileJob(Spec(std::string("run: x\nresources: {gpu: a100-80gb, cpus: 8}\n") +
                             "runtime: " + kContract + "\n"));
  ASSERT_TRUE(req.ok()) << req.status().message();
  EXPECT_EQ(market::ToString(req->query),
            "gpu=a100-80gb gpus>=1 cpus>=8 cuda>=12.1 driver>=535 torch=2.1.0+cu121 "
            "python=3.10");
  const market::Offer good = Node("ok", "535.104.05", "12.2", {"2.1.0+cu121"}, "3.10.12");
  EXPECT_TRUE(market::Matches(req->query, good));
  market::Offer too_small = good;
  too_small.cpus = 4;
  EXPECT_FALSE(market::Matches(req->query, too_small));

  // Without a runtime block the query is what it always was.
  auto plain = CompileJob(Spec("run: x\nresources: {gpu: a100-80gb}\n"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(market::ToString(plain->query), "gpu=a100-80gb gpus>=1");
}

TEST(CompileJob, ExplanationNamesTheRuntimeFactThatFails) {
  auto req =
      CompileJob(Spec(std::string("run: x\nresources: {gpu: a100}\nruntime: ") + kContract + "\n"));
  ASSERT_TRUE(req.ok()) << req.status().message();
  // Every node has the GPU; none has the whole runtime.
  const std::vector<market::Offer> offers = {
      Node("n1", "525.147.05", "12.0", {"2.1.0+cu121"}, "3.10.12"),
      Node("n2", "525.60.13", "12.2", {"2.1.0+cu121"}, "3.10.12"),
      Node("n3", "550.54.15", "12.4", {"2.1.0+cu118"}, "3.11.2"),
  };
  EXPECT_TRUE(Accepted(req->query, offers).empty());
  const market::Explanation e = market::Explain(req->query, offers, 3);
  EXPECT_EQ(e.offers, 3u);
  std::vector<std::pair<std::string, size_t>> per_term;
  for (const auto& t : e.per_term) per_term.emplace_back(t.term, t.eliminated);
  EXPECT_THAT(per_term,
              ElementsAre(std::pair<std::string, size_t>{"gpu in [a100-40gb,a100-80gb]", 0},
                          std::pair<std::string, size_t>{"gpus>=1", 0},
                          std::pair<std::string, size_t>{"cuda>=12.1", 1},
                          std::pair<std::string, size_t>{"driver>=535", 2},
                          std::pair<std::string, size_t>{"torch=2.1.0+cu121", 1},
                          std::pair<std::string, size_t>{"python=3.10", 1}));
  // Nearest first: n2 lacks only the driver, n1 the driver and CUDA, n3 torch and python.
  ASSERT_EQ(e.nearest.size(), 3u);
  EXPECT_EQ(e.nearest[0].offer.id, "n2");
  EXPECT_THAT(e.nearest[0].failed, ElementsAre("driver>=535"));
  EXPECT_THAT(e.nearest[1].failed, ElementsAre("cuda>=12.1", "driver>=535"));
  EXPECT_THAT(e.nearest[2].failed, ElementsAre("torch=2.1.0+cu121", "python=3.10"));
  // The one-line reason a waiting job shows, and the JSON the CLI prints from.
  const std::string summary = market::Summary(e);
  EXPECT_THAT(summary, HasSubstr("`driver>=535` rules out 2"));
  EXPECT_THAT(summary, HasSubstr("nearest: n2 lacks driver>=535"));
  const Json j = market::ToJson(e);
  EXPECT_EQ(j["terms"][3]["term"], "driver>=535");
  EXPECT_EQ(j["terms"][3]["eliminated"], 2);
  EXPECT_EQ(j["nearest"][0]["offer"]["python_version"], "3.10.12");
}

}  // namespace
}  // namespace sluice::market
