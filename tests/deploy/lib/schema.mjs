// Offline schema validation of rendered objects with kubernetes-models (core
// API) and @kubernetes-models/prometheus-operator (monitoring.coreos.com).
//
// The generated validators check types, enums and required fields, but the
// Kubernetes OpenAPI schemas allow unknown fields, which the API server then
// rejects (kubectl's strict field validation) -- a misspelt
// `readOnlyRootFileSystem` would pass them silently. So validation also runs
// on a proxy that records which properties the validator looked up: a key that
// a schema-checked object has but its validator never asked for is not in the
// schema. Objects the validator enumerates (maps: labels, ConfigMap data) and
// objects it never looks into (free-form fields) are not judged.

const MODULES = [
  { group: "", pkg: "kubernetes-models" },
  { group: "monitoring.coreos.com", pkg: "@kubernetes-models/prometheus-operator" },
];

async function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const mod = MODULES.find((m) => m.group === group) ?? { group, pkg: "kubernetes-models" };
  const spec = [mod.pkg, group, version, kind].filter(Boolean).join("/");
  try {
    const m = await import(spec);
    return m[kind];
  } catch {
    return undefined;
  }
}

function track(value, where, nodes) {
  if (value === null || typeof value !== "object") return value;
  const node = { where, value, read: new Set(), enumerated: false };
  nodes.push(node);
  const copy = Array.isArray(value)
    ? value.map((v, i) => track(v, `${where}[${i}]`, nodes))
    : Object.fromEntries(Object.entries(value).map(([k, v]) => [k, track(v, `${where}.${k}`, nodes)]));
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === "string") node.read.add(key);
      return Reflect.get(target, key, receiver);
    },
    has(target, key) {
      if (typeof key === "string") node.read.add(key);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      node.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

// Problems (strings) with one object; [] when it is valid.
export async function validateObject(obj) {
  const id = `${obj.kind}/${obj.metadata?.name}`;
  const Model = await modelFor(obj.apiVersion ?? "", obj.kind ?? "");
  if (!Model) return [`${id}: no schema for apiVersion ${obj.apiVersion} kind ${obj.kind}`];
  const nodes = [];
  try {
    Model.prototype.validate.call(track(obj, "", nodes));
  } catch (err) {
    return [`${id}: ${err.message}`];
  }
  const problems = [];
  for (const n of nodes) {
    if (Array.isArray(n.value) || n.enumerated || n.read.size === 0) continue;
    for (const key of Object.keys(n.value)) {
      if (!n.read.has(key)) problems.push(`${id}: unknown field ${n.where}.${key}`.replace(": unknown field .", ": unknown field "));
    }
  }
  return problems;
}

export async function validateAll(objects) {
  const problems = [];
  for (const obj of objects) problems.push(...(await validateObject(obj)));
  return problems;
}
