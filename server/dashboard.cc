#include "server/dashboard.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/workload.h"
#include "proto/protocol.h"
#include "proto/tuning_curves.h"
#include "server/device_registry.h"
#include "server/store/tuning_log.h"
#include "server/work_queue.h"

namespace tunefarm::server {
namespace {

namespace v1 = ::tunefarm::v1;

// A JSON string literal.
std::string Str(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string Points(const std::vector<TuningCurves::Point>& pts) {
  std::string out = "[";
  for (const TuningCurves::Point& p : pts) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", absl::StrFormat("[%.4g,%.4g]", p.x, p.y));
  }
  return out + "]";
}

}  // namespace

TuningCurves CurveCache::Get(const v1::Job& job, store::TuningLog& log) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_job_.find(job.job_id());
    if (it != by_job_.end() && it->second.trials == job.trials_done() &&
        it->second.state == int(job.state())) {
      return it->second.curves;
    }
  }
  store::TuningLog::RecordQuery q;
  q.job_id = job.job_id();
  q.limit = 10000;
  absl::StatusOr<std::vector<v1::Record>> records = log.ListRecords(q);
  Entry e;
  e.trials = job.trials_done();
  e.state = int(job.state());
  e.curves = CurvesOf(job, records.ok() ? *records : std::vector<v1::Record>{});
  if (!records.ok()) return e.curves;  // not kept: the next poll reads again
  std::lock_guard<std::mutex> lock(mu_);
  by_job_[job.job_id()] = e;
  return e.curves;
}

void CurveCache::Keep(const std::vector<int64_t>& kept) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = by_job_.begin(); it != by_job_.end();) {
    it = std::find(kept.begin(), kept.end(), it->first) == kept.end() ? by_job_.erase(it)
                                                                      : std::next(it);
  }
}

std::string DashboardState(const MetricsSources& s, CurveCache& curves, int max_jobs) {
  std::string out = "{\"devices\":[";
  if (s.devices != nullptr) {
    if (auto devices = s.devices->List(); devices.ok()) {
      bool first = true;
      for (const v1::Device& d : *devices) {
        const v1::Capabilities& c = d.capabilities();
        absl::StrAppend(&out, first ? "" : ",", "{\"id\":", Str(d.device_id()),
                        ",\"role\":", Str(EnumLabel(v1::Role_Name(d.role()), "ROLE_")),
                        ",\"key\":", Str(d.device_key()), ",\"state\":",
                        Str(EnumLabel(v1::DeviceState_Name(d.state()), "DEVICE_STATE_")),
                        ",\"drained\":", d.drained() ? "true" : "false",
                        ",\"timings_confirmed\":", d.timings_confirmed(),
                        ",\"timings_disputed\":", d.timings_disputed(),
                        ",\"timings_flagged\":", TimingsDisputed(d) ? "true" : "false",
                        ",\"triple\":", Str(c.triple()), ",\"cpu\":", Str(c.cpu_model()),
                        ",\"gpu\":", Str(c.has_gpu() ? c.gpu_name() : ""), "}");
        first = false;
      }
    }
  }
  out += "],\"queues\":[";
  if (s.queue != nullptr) {
    bool first = true;
    for (const auto& [name, depth] : s.queue->QueuedByKey()) {
      absl::StrAppend(&out, first ? "" : ",", "{\"name\":", Str(name), ",\"depth\":", depth, "}");
      first = false;
    }
    absl::StrAppend(&out, "],\"leases\":", s.queue->LeasesOut());
  } else {
    out += "],\"leases\":0";
  }
  out += ",\"jobs\":[";
  if (s.log != nullptr) {
    if (auto jobs = s.log->ListJobs(v1::JOB_STATE_UNSPECIFIED, max_jobs); jobs.ok()) {
      bool first = true;
      std::vector<int64_t> listed;
      for (const v1::Job& j : *jobs) {
        listed.push_back(j.job_id());
        const TuningCurves c = curves.Get(j, *s.log);
        absl::StrAppend(
            &out, first ? "" : ",", "{\"id\":", j.job_id(), ",\"name\":", Str(j.spec().name()),
            ",\"state\":", Str(EnumLabel(v1::JobState_Name(j.state()), "JOB_STATE_")),
            ",\"message\":", Str(j.status_message()), ",\"trials\":", j.trials_done(),
            ",\"budget\":", j.spec().budget().max_trials(), ",\"key\":", Str(j.spec().device_key()),
            ",\"target\":", Str(j.spec().target().spec()), ",\"model_ms\":", Points(c.model_ms),
            ",\"tasks\":[");
        for (int t = 0; t < j.tasks_size(); ++t) {
          const v1::Task& task = j.tasks(t);
          absl::StrAppend(&out, t ? "," : "", "{\"desc\":", Str(ir::Describe(task.workload())),
                          ",\"weight\":", task.weight(), ",\"trials\":", task.trials(),
                          ",\"best_us\":", absl::StrFormat("%.4g", task.best_cost_sec() * 1e6),
                          ",\"gflops\":", Points(c.by_trial[size_t(t)]), "}");
        }
        out += "]}";
        first = false;
      }
      curves.Keep(listed);
    }
  }
  return out + "]}";
}

const std::string& DashboardHtml() {
  static const std::string html = R"html(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>tunefarm</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border-bottom:1px solid #ddd;padding:3px 10px;text-align:left;font-size:13px}
.online{color:#2a7} .offline{color:#999} .drained{color:#c70} .disputed{color:#c22;font-weight:bold}
.bar{display:inline-block;width:120px;height:8px;background:#eee;vertical-align:middle}
.bar i{display:block;height:8px;background:#48c}
.curves svg{margin:0 12px 12px 0;border:1px solid #eee}
#error{color:#c33}
</style></head><body>
<h1>tunefarm</h1><div id="error"></div><div id="updated"></div>
<h2>Devices</h2><table id="devices"><tr><th>device</th><th>role</th><th>key</th><th>state</th><th>runs</th></tr></table>
<h2>Queues</h2><table id="queues"><tr><th>queue</th><th>waiting</th></tr></table><div id="leases"></div>
<h2>Jobs</h2><div id="jobs"></div>
<script>
const token = new URLSearchParams(location.search).get('token');
function esc(s){return String(s).replace(/[&<>"']/g,c=>'&#'+c.charCodeAt(0)+';');}
function chart(title, pts, color){
  const W=300,H=150,P=30; let xm=1e-9,ym=1e-9;
  for(const [x,y] of pts){xm=Math.max(xm,x);ym=Math.max(ym,y);} ym*=1.1;
  const X=x=>P+(W-2*P)*x/xm, Y=y=>H-P-(H-2*P)*y/ym;
  const line=pts.map(([x,y])=>X(x).toFixed(1)+','+Y(y).toFixed(1)).join(' ');
  return '<svg width="'+W+'" height="'+H+'" font-size="10"><text x="4" y="12">'+esc(title)+'</text>'+
    '<line x1="'+P+'" y1="'+(H-P)+'" x2="'+(W-P)+'" y2="'+(H-P)+'" stroke="#000"/>'+
    '<line x1="'+P+'" y1="'+(H-P)+'" x2="'+P+'" y2="'+P+'" stroke="#000"/>'+
    (pts.length?'<polyline fill="none" stroke="'+color+'" stroke-width="2" points="'+line+'"/>':'')+
    '<text x="'+P+'" y="'+(P-4)+'">max '+(ym/1.1).toPrecision(3)+'</text></svg>';
}
function draw(s){
  let d='<tr><th>device</th><th>role</th><th>key</th><th>state</th><th>runs</th><th>timings checked</th></tr>';
  for(const v of s.devices){
    const st=v.drained?'drained':v.state;
    const t=v.timings_confirmed+v.timings_disputed?v.timings_confirmed+' confirmed, '+v.timings_disputed+' disputed':'';
    d+='<tr class="device"><td>'+esc(v.id)+'</td><td>'+esc(v.role)+'</td><td>'+esc(v.key)+
       '</td><td class="'+esc(st)+'">'+esc(st)+'</td><td>'+esc(v.triple+' '+v.cpu+(v.gpu?', '+v.gpu:''))+
       '</td><td class="'+(v.timings_flagged?'disputed':'')+'">'+esc(t)+'</td></tr>';
  }
  document.getElementById('devices').innerHTML=d;
  let q='<tr><th>queue</th><th>waiting</th></tr>';
  for(const v of s.queues) q+='<tr><td>'+esc(v.name)+'</td><td>'+v.depth+'</td></tr>';
  document.getElementById('queues').innerHTML=q;
  document.getElementById('leases').textContent='leases in flight: '+s.leases;
  let j='';
  for(const v of s.jobs){
    const pct=v.budget>0?Math.min(100,100*v.trials/v.budget):0;
    j+='<div class="job" id="job-'+v.id+'"><h3>job '+v.id+' '+esc(v.name)+' <span class="state">'+esc(v.state)+
       '</span></h3><div>'+esc(v.target)+' on '+esc(v.key)+' &middot; trials '+v.trials+(v.budget>0?'/'+v.budget:'')+
       ' <span class="bar"><i style="width:'+pct+'%"></i></span> '+esc(v.message)+'</div><div class="curves">'+
       chart('model ms by the best so far, over minutes',v.model_ms,'#2ca02c');
    for(const t of v.tasks) j+=chart(t.desc+' x'+t.weight+': best GFLOP/s over trials',t.gflops,'#d62728');
    j+='</div></div>';
  }
  document.getElementById('jobs').innerHTML=j;
  document.getElementById('updated').textContent='updated '+new Date().toLocaleTimeString();
}
async function poll(){
  try{
    const r=await fetch('/api/state',{headers:token?{'Authorization':'Bearer '+token}:{}});
    if(!r.ok) throw new Error(r.status+' '+(await r.text()));
    draw(await r.json()); document.getElementById('error').textContent='';
  }catch(e){document.getElementById('error').textContent=String(e);}
  setTimeout(poll,2000);
}
poll();
</script></body></html>
)html";
  return html;
}

}  // namespace tunefarm::server
