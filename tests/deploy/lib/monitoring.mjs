// Checks of the Prometheus Operator objects and the Grafana dashboard.
import { find, findAll } from "./render.mjs";
import { rpcNames } from "./interface.mjs";
import { checkPromQL, expandGrafanaVariables, metricNames } from "./promql.mjs";
import { APP, daemonSet, mainContainer } from "./checks.mjs";

const SEVERITIES = new Set(["critical", "warning", "info"]);

// The job label the alerts and dashboard select on (job="echod").
export function scrapeJob(objects) {
  const pm = find(objects, "PodMonitor");
  const labels = daemonSet(objects)?.spec?.template?.metadata?.labels ?? {};
  if (pm?.spec?.jobLabel) return labels[pm.spec.jobLabel];
  return pm ? `${pm.metadata.namespace}/${pm.metadata.name}` : undefined;
}

export function checkScrape(objects) {
  const problems = [];
  const pm = find(objects, "PodMonitor");
  if (!pm) return ["no PodMonitor"];
  const ds = daemonSet(objects);
  const labels = ds?.spec?.template?.metadata?.labels ?? {};
  for (const [k, v] of Object.entries(pm.spec.selector?.matchLabels ?? {})) {
    if (labels[k] !== v) problems.push(`PodMonitor selector ${k}=${v} does not match the echod pods`);
  }
  if (Object.keys(pm.spec.selector?.matchLabels ?? {}).length === 0 && !(pm.spec.selector?.matchExpressions?.length)) {
    problems.push("PodMonitor selects every pod");
  }
  const ports = new Set((mainContainer(ds)?.ports ?? []).map((p) => p.name));
  for (const ep of pm.spec.podMetricsEndpoints ?? []) {
    if (!ports.has(ep.port)) problems.push(`PodMonitor scrapes port ${ep.port}, which the echod container does not name`);
    if (ep.port !== "metrics") problems.push(`PodMonitor scrapes ${ep.port}, not the metrics port`);
    if ((ep.path ?? "/metrics") !== "/metrics") problems.push(`PodMonitor path ${ep.path} is not /metrics`);
    const node = (ep.relabelings ?? []).some((r) =>
      r.targetLabel === "node" && (r.sourceLabels ?? []).includes("__meta_kubernetes_pod_node_name"));
    if (!node) problems.push("PodMonitor does not label series with the node name (node)");
  }
  if (scrapeJob(objects) !== APP) problems.push(`scraped series get job="${scrapeJob(objects)}", but alerts and dashboard use job="${APP}"`);
  return problems;
}

// Each alert: parses, reads real series, has `for`, severity and text; and the
// set covers the failures that matter.
export function checkRules(objects) {
  const problems = [];
  const rules = findAll(objects, "PrometheusRule").flatMap((pr) =>
    (pr.spec.groups ?? []).flatMap((g) => (g.rules ?? []).map((r) => ({ ...r, group: g.name }))));
  if (rules.length === 0) return ["no alert rules"];
  const rpcs = rpcNames();
  const names = new Set();
  for (const r of rules) {
    const id = r.alert ?? r.record;
    if (names.has(id)) problems.push(`duplicate rule ${id}`);
    names.add(id);
    problems.push(...checkPromQL(r.expr, { where: `${id}: `, rpcNames: rpcs, job: APP }));
    if (!r.alert) continue;
    if (!r.for) problems.push(`${id}: no "for" (would page on a single bad scrape)`);
    if (!SEVERITIES.has(r.labels?.severity)) problems.push(`${id}: severity ${r.labels?.severity} is not one of ${[...SEVERITIES]}`);
    if (!r.annotations?.summary || !r.annotations?.description) problems.push(`${id}: no summary/description`);
    for (const [k, v] of Object.entries(r.annotations ?? {})) {
      if ((v.match(/{{/g) ?? []).length !== (v.match(/}}/g) ?? []).length) problems.push(`${id}: unbalanced template in ${k}`);
    }
  }
  const alerts = rules.filter((r) => r.alert);
  const covers = (what, pred) => {
    if (!alerts.some(pred)) problems.push(`no alert for ${what}`);
  };
  const uses = (r, metric, re) => metricNames(r.expr).includes(metric) && (!re || re.test(r.expr));
  covers("echod down on a GPU node", (r) => uses(r, "up", /up\{[^}]*job="echod"[^}]*\}\s*==\s*0/));
  covers("the server-side error ratio", (r) => uses(r, "echo_requests_total", /code=~?"[^"]*(INTERNAL|UNKNOWN)/));
  covers("plan latency", (r) => uses(r, "echo_request_duration_seconds_bucket", /GenerateRecomputePlan/) || uses(r, "echo_plan_solve_duration_seconds_bucket"));
  covers("profile failures", (r) => uses(r, "echo_profile_runs_total", /result="error"/));
  covers("planner errors", (r) => uses(r, "echo_plans_total", /outcome="error"/));
  return problems;
}

function dashboardsOf(objects) {
  const out = [];
  for (const cm of findAll(objects, "ConfigMap")) {
    if (cm.metadata?.labels?.grafana_dashboard !== "1") continue;
    for (const [key, text] of Object.entries(cm.data ?? {})) out.push({ cm, key, text });
  }
  return out;
}

export function allPanels(dashboard) {
  return (dashboard.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]);
}

export function checkDashboards(objects) {
  const problems = [];
  const list = dashboardsOf(objects);
  if (list.length === 0) return ["no dashboard ConfigMap"];
  const rpcs = rpcNames();
  for (const { cm, key, text } of list) {
    const where = `${cm.metadata.name}/${key}`;
    if (!key.endsWith(".json")) problems.push(`${where}: the sidecar loads *.json keys only`);
    if (/-[a-z0-9]{10}$/.test(cm.metadata.name)) problems.push(`${where}: hashed ConfigMap name leaves stale dashboards behind`);
    let d;
    try {
      d = JSON.parse(text);
    } catch (err) {
      problems.push(`${where}: not JSON: ${err.message}`);
      continue;
    }
    if (!d.uid || !d.title) problems.push(`${where}: no uid/title`);
    if (d.id !== undefined && d.id !== null) problems.push(`${where}: has a numeric id (Grafana would clash with the instance's own)`);
    const vars = new Set((d.templating?.list ?? []).map((v) => v.name));
    if (!vars.has("datasource")) problems.push(`${where}: no datasource variable`);
    const panels = allPanels(d);
    const ids = panels.map((p) => p.id);
    if (new Set(ids).size !== ids.length) problems.push(`${where}: duplicate panel ids`);
    const boxes = panels.filter((p) => p.gridPos);
    for (let i = 0; i < boxes.length; i++) {
      const a = boxes[i].gridPos;
      if (a.x + a.w > 24) problems.push(`${where}: panel "${boxes[i].title}" is wider than the grid`);
      for (let j = i + 1; j < boxes.length; j++) {
        const b = boxes[j].gridPos;
        if (a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h) {
          problems.push(`${where}: panels "${boxes[i].title}" and "${boxes[j].title}" overlap`);
        }
      }
    }
    const exprs = [];
    for (const p of panels.filter((p) => p.type !== "row")) {
      if (!p.targets?.length) problems.push(`${where}: panel "${p.title}" has no query`);
      if (p.datasource?.uid !== "${datasource}") problems.push(`${where}: panel "${p.title}" does not use the datasource variable`);
      for (const t of p.targets ?? []) {
        for (const v of t.expr.matchAll(/\$\{?(\w+)\}?/g)) {
          if (!v[1].startsWith("__") && !vars.has(v[1])) problems.push(`${where}: panel "${p.title}" uses undefined variable $${v[1]}`);
        }
        const expr = expandGrafanaVariables(t.expr);
        exprs.push({ panel: p.title, expr });
        problems.push(...checkPromQL(expr, { where: `${where}: panel "${p.title}": `, rpcNames: rpcs, job: APP }));
      }
    }
    const covers = (what, pred) => {
      if (!exprs.some(pred)) problems.push(`${where}: no panel for ${what}`);
    };
    const reads = (e, m) => metricNames(e.expr).includes(m);
    covers("memory saved", (e) => reads(e, "echo_bytes_saved_total") || reads(e, "echo_plan_bytes_saved_bucket"));
    covers("plans by policy and outcome", (e) => reads(e, "echo_plans_total") && /by \(policy, outcome\)|by \(outcome, policy\)/.test(e.expr));
    covers("latency", (e) => reads(e, "echo_request_duration_seconds_bucket"));
    covers("errors", (e) => reads(e, "echo_requests_total") && /code/.test(e.expr));
    covers("the profile cache", (e) => reads(e, "echo_profile_cache_hits_total") || reads(e, "echo_profile_cache_entries"));
  }
  return problems;
}
