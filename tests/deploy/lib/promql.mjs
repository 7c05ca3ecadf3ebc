// PromQL checks for the alert rules and dashboard queries: the expression
// parses (Prometheus' own Lezer grammar), every series is one echod exports
// (or `up` / kube-state-metrics), counters are only read through rate() or
// increase(), histograms only through their _bucket/_sum/_count series and
// histogram_quantile() keeps `le`, label matchers and `by (...)` name labels
// the metric has, and label values are ones echod emits.
import { parser } from "@prometheus-io/lezer-promql";
import { EXTERNAL_METRICS, METRICS, TARGET_LABELS } from "./interface.mjs";

const COUNTER_FUNCTIONS = new Set(["rate", "increase", "irate", "resets"]);
const HISTOGRAM_SUFFIXES = ["_bucket", "_sum", "_count"];

// Grafana template variables, replaced by something PromQL accepts.
export function expandGrafanaVariables(expr) {
  return expr
    .replaceAll("$__rate_interval", "5m")
    .replaceAll("$__interval", "1m")
    .replaceAll("$__range", "1h")
    .replace(/\$\{?(\w+)\}?/g, ".*");
}

// { base, series, def }: what a series name refers to.
export function resolveMetric(name) {
  if (METRICS[name]) return { base: name, series: "plain", def: METRICS[name] };
  for (const suffix of HISTOGRAM_SUFFIXES) {
    const base = name.endsWith(suffix) ? name.slice(0, -suffix.length) : null;
    if (base && METRICS[base]?.type === "histogram") return { base, series: suffix, def: METRICS[base] };
  }
  if (EXTERNAL_METRICS[name]) return { base: name, series: "plain", def: EXTERNAL_METRICS[name] };
  return null;
}

function text(expr, node) {
  return expr.slice(node.from, node.to);
}

function children(node, name) {
  const out = [];
  for (let c = node.firstChild; c; c = c.nextSibling) if (c.type.name === name) out.push(c);
  return out;
}

function descendants(node, name) {
  const out = [];
  const walk = (n) => {
    for (let c = n.firstChild; c; c = c.nextSibling) {
      if (c.type.name === name) out.push(c);
      walk(c);
    }
  };
  walk(node);
  return out;
}

function functionName(expr, call) {
  const id = children(call, "FunctionIdentifier")[0];
  return id ? text(expr, id) : "";
}

function enclosingFunctions(expr, node) {
  const names = [];
  for (let p = node.parent; p; p = p.parent) if (p.type.name === "FunctionCall") names.push(functionName(expr, p));
  return names;
}

// The literal alternatives a matcher value allows, or null when it is a real
// pattern (".*", "[a-z]+", ...). ".*(A|B)" counts as A, B.
function literalAlternatives(value, isRegex) {
  if (!isRegex) return [value];
  const stripped = value.replace(/^\.\*/, "").replace(/^\((.*)\)$/, "$1");
  if (!/^[\w|]+$/.test(stripped)) return null;
  return stripped.split("|");
}

function unquote(s) {
  return JSON.parse(s.startsWith("'") ? `"${s.slice(1, -1).replaceAll('"', '\\"')}"` : s);
}

function metricLabels(resolved) {
  const labels = new Set([...TARGET_LABELS, ...resolved.def.labels]);
  if (resolved.series === "_bucket") labels.add("le");
  return labels;
}

// Problems (strings) with one expression; `where` prefixes each of them.
export function checkPromQL(expr, { where = "", rpcNames = new Set(), job = "echod" } = {}) {
  const problems = [];
  const report = (msg) => problems.push(`${where}${msg}`);
  const tree = parser.parse(expr);
  let syntaxError = false;
  tree.iterate({
    enter(n) {
      if (n.type.isError && !syntaxError) {
        syntaxError = true;
        report(`syntax error at offset ${n.from}: ...${expr.slice(Math.max(0, n.from - 20), n.from + 20)}...`);
      }
    },
  });
  if (syntaxError) return problems;
  const root = tree.topNode;

  for (const sel of descendants(root, "VectorSelector")) {
    const idNode = children(sel, "Identifier")[0];
    if (!idNode) {
      report(`selector without a metric name: ${text(expr, sel)}`);
      continue;
    }
    const name = text(expr, idNode);
    const resolved = resolveMetric(name);
    if (!resolved) {
      report(`unknown metric ${name} (not exported by echod)`);
      continue;
    }
    const { def, series } = resolved;
    const funcs = enclosingFunctions(expr, sel);
    const inRange = sel.parent?.type.name === "MatrixSelector";
    if (def.type === "histogram" && series === "plain") {
      report(`${name} is a histogram: use ${name}_bucket, _sum or _count`);
    }
    if ((def.type === "counter" || (def.type === "histogram" && series !== "plain")) &&
        !(inRange && COUNTER_FUNCTIONS.has(funcs[0]))) {
      report(`${name} is a counter: read it through rate() or increase() over a range`);
    }
    if (series === "_bucket" && !funcs.includes("histogram_quantile")) {
      report(`${name} outside histogram_quantile()`);
    }
    if (def.external) continue;
    const allowed = metricLabels(resolved);
    for (const m of descendants(sel, "UnquotedLabelMatcher")) {
      const label = text(expr, children(m, "LabelName")[0]);
      const op = text(expr, children(m, "MatchOp")[0]);
      const value = unquote(text(expr, children(m, "StringLiteral")[0]));
      if (!allowed.has(label)) {
        report(`${name} has no label ${label}`);
        continue;
      }
      let values = def.values?.[label];
      if (label === "method" && rpcNames.size > 0) values = rpcNames;
      if (label === "job") values = new Set([job]);
      if (!values) continue;
      const alternatives = literalAlternatives(value, op === "=~" || op === "!~");
      if (alternatives === null) continue;
      for (const alt of alternatives) {
        if (!values.has(alt)) report(`${name}{${label}${op}"${value}"}: "${alt}" is not a value of ${label}`);
      }
    }
  }

  for (const agg of descendants(root, "AggregateExpr")) {
    const modifier = children(agg, "AggregateModifier")[0];
    if (!modifier || children(modifier, "By").length === 0) continue;
    const grouping = children(modifier, "GroupingLabels")[0];
    const labels = grouping ? children(grouping, "LabelName").map((l) => text(expr, l)) : [];
    const allowed = new Set();
    let external = false;
    for (const sel of descendants(agg, "VectorSelector")) {
      const idNode = children(sel, "Identifier")[0];
      const resolved = idNode && resolveMetric(text(expr, idNode));
      if (!resolved) continue;
      if (resolved.def.external) external = true;
      for (const l of metricLabels(resolved)) allowed.add(l);
    }
    if (external) continue;
    for (const l of labels) {
      if (!allowed.has(l)) report(`"by (${labels.join(", ")})": no series in ${text(expr, agg).slice(0, 60)}... has label ${l}`);
    }
  }

  for (const call of descendants(root, "FunctionCall")) {
    if (functionName(expr, call) !== "histogram_quantile") continue;
    const inner = descendants(call, "AggregateExpr")[0];
    const modifier = inner && children(inner, "AggregateModifier")[0];
    const grouping = modifier && children(modifier, "By").length > 0 && children(modifier, "GroupingLabels")[0];
    const labels = grouping ? children(grouping, "LabelName").map((l) => text(expr, l)) : [];
    if (!labels.includes("le")) report(`histogram_quantile() over an aggregation that drops "le": ${text(expr, call).slice(0, 80)}`);
  }
  return problems;
}

// Every metric name an expression reads (for "is this topic covered" checks).
export function metricNames(expr) {
  const tree = parser.parse(expr);
  return descendants(tree.topNode, "VectorSelector")
    .map((sel) => children(sel, "Identifier")[0])
    .filter(Boolean)
    .map((id) => text(expr, id));
}
