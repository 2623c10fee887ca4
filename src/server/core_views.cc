// JSON views of the core's records, shared by the API handlers.
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

Json JobToJson(const JobRecord& j) {
  Json out{{"id", j.id},
           {"name", j.name},
           {"state", st::Name(j.state)},
           {"priority", j.priority},
           {"submitted_ms", j.submitted_ms},
           {"started_ms", j.started_ms},
           {"finished_ms", j.finished_ms},
           {"exit_code", j.exit_code ? Json(*j.exit_code) : Json(nullptr)},
           {"reason", j.reason},
           {"attempt_id", j.attempt_id},
           {"cancel_requested", j.cancel_requested},
           {"workdir_blob", j.workdir_blob},
           {"checkpoint", j.checkpoint},
           {"preemptions", j.preemptions},
           {"spec", j.spec}};
  return out;
}

Json AttemptToJson(const AttemptRecord& a) {
  return Json{{"id", a.id},
              {"job_id", a.job_id},
              {"node_id", a.node_id},
              {"gpus", a.gpus},
              {"cpus", a.cpus},
              {"memory_gb", a.memory_gb},
              {"price_per_hour", a.price_per_hour},
              {"state", st::Name(a.state)},
              {"created_ms", a.created_ms},
              {"started_ms", a.started_ms},
              {"ended_ms", a.ended_ms},
              {"exit_code", a.exit_code ? Json(*a.exit_code) : Json(nullptr)},
              {"cause", a.cause},
              {"number", a.number},
              {"checkpoint_restored", a.checkpoint_restored},
              {"interruptible", a.interruptible},
              {"expected_cost_micros", a.expected_cost_micros}};
}

Json EventToJson(const st::JobEvent& e) {
  return Json{{"id", e.id},
              {"job_id", e.job_id},
              {"ts_ms", e.ts_ms},
              {"event", e.type},
              {"message", e.message}};
}

Json LogToJson(const st::LogLine& l) {
  return Json{{"type", "log"}, {"id", l.id},         {"attempt_id", l.attempt_id},
              {"seq", l.seq},  {"stream", l.stream}, {"ts_ms", l.ts_ms},
              {"text", l.text}};
}

namespace {

Json GpuSpeedsJson(const std::vector<audit::GpuSpeed>& speeds) {
  Json out = Json::array();
  for (const auto& s : speeds) {
    out.push_back({{"index", s.index},
                   {"matmul_mode", s.matmul_mode == 1 ? "fp16-tensor" : "fp32-fma"},
                   {"measured_tflops", s.measured_tflops},
                   {"measured_gb_s", s.measured_gb_s},
                   {"spec_tflops", s.spec_tflops},
                   {"spec_gb_s", s.spec_gb_s},
                   {"ratio", s.ratio},
                   {"flagged", s.flagged},
                   {"note", s.note}});
  }
  return out;
}

}  // namespace

Json NodeToJson(const NodeView& v) {
  const auto& n = v.node;
  return Json{{"id", n.id},
              {"name", n.name},
              {"state", st::Name(n.state)},
              {"registered_ms", n.registered_ms},
              {"last_seen_ms", n.last_seen_ms},
              {"price_per_gpu_hour", n.price_per_gpu_hour},
              {"price_per_cpu_hour", n.price_per_cpu_hour},
              {"region", n.region},
              {"gpus_free", v.gpus_free},
              {"cpus_free", v.cpus_free},
              {"memory_free_gb", v.memory_free_gb},
              {"running_attempts", v.running_attempts},
              {"inventory", n.inventory},
              {"verification", n.verification},
              {"verification_reasons", n.verification_reasons},
              {"verifying", v.verifying},
              {"verification_queued", v.verify_queued},
              {"verified_ms", n.verified_ms},
              {"hardware_fingerprint", n.hardware_fingerprint},
              {"software_fingerprint", n.software_fingerprint},
              {"conformance", n.conformance},
              {"revoked", n.revoked},
              {"paused_until_ms", n.paused_until_ms},
              {"paused_reason", n.paused_reason},
              {"reliability", market::ToJson(v.reliability)},
              {"gpu_speeds", GpuSpeedsJson(v.gpu_speeds)}};
}

}  // namespace sluice::server
