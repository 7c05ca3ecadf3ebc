// Property checks of the rendered manifests. Each returns a list of problems
// (strings), empty when the objects are right, so that the tests can both
// assert "no problems" on the real manifests and assert that a deliberately
// broken copy is caught (test/mutations.test.mjs).
import path from "node:path";
import { find, findAll } from "./render.mjs";
import {
  FLAG_ENV, GRPC_PORT, HEALTH_SERVICES, LOG_LEVELS, METRICS_PORT,
} from "./interface.mjs";

export const NAMESPACE = "echo";
export const APP = "echod";
const NVIDIA_NODE_LABELS = new Set([
  "nvidia.com/gpu.present",
  "feature.node.kubernetes.io/pci-10de.present",
]);
// hostPath directories echod may use, and nothing else of the node.
const ALLOWED_HOST_PATHS = [/^\/run\/echo$/, /^\/var\/lib\/echo(\/[\w.-]+)*$/];
const CLUSTER_SCOPED = new Set(["Namespace"]);

const portOf = (address) => Number(String(address).split(":").pop());
const hostOf = (address) => String(address).slice(0, String(address).lastIndexOf(":"));

export function daemonSet(objects) {
  return find(objects, "DaemonSet", APP);
}

export function mainContainer(ds) {
  return ds?.spec?.template?.spec?.containers?.find((c) => c.name === APP);
}

// The ECHO_* settings the echod container gets: ConfigMaps from envFrom, then
// explicit env entries (which win, as in Kubernetes).
export function effectiveConfig(objects) {
  const c = mainContainer(daemonSet(objects));
  const config = {};
  for (const src of c?.envFrom ?? []) {
    const cm = src.configMapRef && find(objects, "ConfigMap", src.configMapRef.name);
    Object.assign(config, cm?.data ?? {});
  }
  for (const e of c?.env ?? []) if (e.value !== undefined) config[e.name] = e.value;
  return config;
}

export function checkNamespaces(objects) {
  const problems = [];
  if (!find(objects, "Namespace", NAMESPACE)) problems.push(`no Namespace ${NAMESPACE}`);
  for (const o of objects) {
    if (CLUSTER_SCOPED.has(o.kind)) continue;
    if (o.metadata?.namespace !== NAMESPACE) {
      problems.push(`${o.kind}/${o.metadata?.name} is in namespace ${o.metadata?.namespace ?? "(none)"}, not ${NAMESPACE}`);
    }
  }
  const ids = objects.map((o) => `${o.kind}/${o.metadata?.namespace}/${o.metadata?.name}`);
  for (const id of new Set(ids)) if (ids.filter((x) => x === id).length > 1) problems.push(`duplicate object ${id}`);
  return problems;
}

export function checkImages(objects) {
  const problems = [];
  const ds = daemonSet(objects);
  const pod = ds?.spec?.template?.spec ?? {};
  for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
    const image = c.image ?? "";
    const tag = image.includes("@") ? "digest" : image.split("/").pop().split(":")[1];
    if (!tag || tag === "latest") problems.push(`container ${c.name}: image ${image} has no fixed tag or digest`);
    if (image !== mainContainer(ds)?.image) problems.push(`container ${c.name}: image ${image} is not echod's image`);
  }
  return problems;
}

// Lands on NVIDIA GPU nodes only, tolerates their taints, sees the GPUs
// without claiming one.
export function checkGpuPlacement(objects) {
  const problems = [];
  const ds = daemonSet(objects);
  if (!ds) return [`no DaemonSet ${APP}`];
  const pod = ds.spec.template.spec;
  const terms = pod.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  if (terms.length === 0) problems.push("no required node affinity: echod would land on every node");
  terms.forEach((term, i) => {
    const gpuExpr = (term.matchExpressions ?? []).find((e) =>
      NVIDIA_NODE_LABELS.has(e.key) &&
      ((e.operator === "In" && e.values?.length > 0 && e.values.every((v) => v === "true")) || e.operator === "Exists"));
    if (!gpuExpr) problems.push(`node selector term ${i} does not require an NVIDIA GPU node label`);
  });
  for (const [k, v] of Object.entries(pod.nodeSelector ?? {})) {
    if (!NVIDIA_NODE_LABELS.has(k)) problems.push(`nodeSelector ${k}=${v} is not an NVIDIA GPU node label`);
  }
  // Any value: the GPU Operator and cloud providers use different ones.
  const tolerated = (pod.tolerations ?? []).some((t) =>
    t.operator === "Exists" && (t.key === "nvidia.com/gpu" || t.key === undefined) &&
    (t.effect === undefined || t.effect === "NoSchedule"));
  if (!tolerated) problems.push("no toleration for nvidia.com/gpu taints (operator Exists, effect NoSchedule or any)");
  for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
    for (const kind of ["requests", "limits"]) {
      for (const r of Object.keys(c.resources?.[kind] ?? {})) {
        if (r.startsWith("nvidia.com/")) problems.push(`container ${c.name} claims ${r} in ${kind}: echod must not take GPUs from jobs`);
      }
    }
  }
  const env = Object.fromEntries((mainContainer(ds)?.env ?? []).map((e) => [e.name, e.value]));
  if (env.NVIDIA_VISIBLE_DEVICES !== "all") problems.push(`NVIDIA_VISIBLE_DEVICES is ${env.NVIDIA_VISIBLE_DEVICES}, not "all"`);
  const caps = new Set(String(env.NVIDIA_DRIVER_CAPABILITIES ?? "").split(","));
  for (const need of ["compute", "utility"]) {
    if (!caps.has(need)) problems.push(`NVIDIA_DRIVER_CAPABILITIES lacks ${need}`);
  }
  for (const cap of caps) {
    if (!["compute", "utility"].includes(cap)) problems.push(`NVIDIA_DRIVER_CAPABILITIES grants ${cap}, which echod does not need`);
  }
  if (pod.runtimeClassName !== undefined && pod.runtimeClassName !== "nvidia") {
    problems.push(`runtimeClassName ${pod.runtimeClassName} is not the NVIDIA runtime`);
  }
  return problems;
}

export function checkSecurity(objects) {
  const problems = [];
  const ds = daemonSet(objects);
  if (!ds) return [`no DaemonSet ${APP}`];
  const pod = ds.spec.template.spec;
  const psc = pod.securityContext ?? {};
  if (psc.runAsNonRoot !== true) problems.push("pod securityContext.runAsNonRoot is not true");
  if (!(psc.runAsUser > 0)) problems.push("pod securityContext.runAsUser is not a non-root uid");
  if (psc.seccompProfile?.type !== "RuntimeDefault") problems.push("pod seccompProfile is not RuntimeDefault");
  if (pod.automountServiceAccountToken !== false) problems.push("pod automountServiceAccountToken is not false");
  const sa = find(objects, "ServiceAccount", pod.serviceAccountName);
  if (!sa) problems.push(`ServiceAccount ${pod.serviceAccountName} is not in the manifests`);
  else if (sa.automountServiceAccountToken !== false) problems.push(`ServiceAccount ${sa.metadata.name} automounts its token`);
  for (const f of ["hostNetwork", "hostPID", "hostIPC"]) if (pod[f]) problems.push(`pod sets ${f}`);
  const check = (c, isInit) => {
    const sc = c.securityContext ?? {};
    const who = `${isInit ? "init container" : "container"} ${c.name}`;
    if (sc.allowPrivilegeEscalation !== false) problems.push(`${who}: allowPrivilegeEscalation is not false`);
    if (sc.readOnlyRootFilesystem !== true) problems.push(`${who}: readOnlyRootFilesystem is not true`);
    if (sc.privileged) problems.push(`${who}: privileged`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) problems.push(`${who}: does not drop ALL capabilities`);
    if (sc.seccompProfile && sc.seccompProfile.type !== "RuntimeDefault") problems.push(`${who}: seccompProfile overridden`);
    const added = sc.capabilities?.add ?? [];
    const root = sc.runAsUser === 0 || sc.runAsNonRoot === false;
    if (!isInit) {
      if (root) problems.push(`${who}: runs as root`);
      if (added.length > 0) problems.push(`${who}: adds capabilities ${added.join(",")}`);
      for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) if (!c[p]) problems.push(`${who}: no ${p}`);
    } else if (root || added.length > 0) {
      // The one exception: a root init container that can do nothing but
      // chown echod's host directories.
      const onlyChown = added.every((a) => a === "CHOWN") && c.command?.[0] === "chown";
      if (!onlyChown) problems.push(`${who}: runs as root / adds ${added.join(",")} for more than chown`);
    }
    for (const kind of ["requests", "limits"]) {
      for (const r of ["cpu", "memory"]) {
        if (c.resources?.[kind]?.[r] === undefined) problems.push(`${who}: no ${r} ${kind.slice(0, -1)}`);
      }
    }
  };
  for (const c of pod.initContainers ?? []) check(c, true);
  for (const c of pod.containers ?? []) check(c, false);
  return problems;
}

export function checkProbes(objects, { tls }) {
  const problems = [];
  const c = mainContainer(daemonSet(objects));
  if (!c) return [`no container ${APP}`];
  const config = effectiveConfig(objects);
  for (const name of ["startupProbe", "livenessProbe", "readinessProbe"]) {
    const probe = c[name];
    if (!probe) {
      problems.push(`no ${name}`);
      continue;
    }
    const handlers = ["grpc", "exec", "httpGet", "tcpSocket"].filter((h) => probe[h]);
    if (handlers.length !== 1) problems.push(`${name} has handlers ${handlers.join(",") || "none"}`);
    if (!tls) {
      // Native kubelet gRPC probe against grpc.health.v1 on echod's port.
      if (!probe.grpc) {
        problems.push(`${name} is not a native gRPC probe`);
      } else {
        if (probe.grpc.port !== GRPC_PORT) problems.push(`${name} probes port ${probe.grpc.port}, not ${GRPC_PORT}`);
        if (!HEALTH_SERVICES.has(probe.grpc.service ?? "")) problems.push(`${name} asks for health service ${probe.grpc.service}, which echod does not serve`);
      }
    } else {
      // The kubelet's gRPC probe cannot do TLS: echoctl over the Unix socket.
      const want = ["echoctl", "--server", `unix://${config.ECHO_UNIX_SOCKET}`, "health"];
      if (probe.grpc) problems.push(`${name} is a kubelet gRPC probe, which cannot speak TLS`);
      if (JSON.stringify(probe.exec?.command) !== JSON.stringify(want)) {
        problems.push(`${name} runs ${JSON.stringify(probe.exec?.command)}, not ${JSON.stringify(want)}`);
      }
    }
    if (!(probe.timeoutSeconds >= 1) || !(probe.periodSeconds >= 1)) problems.push(`${name} has no timeout/period`);
  }
  const grace = daemonSet(objects).spec.template.spec.terminationGracePeriodSeconds ?? 30;
  const startBudget = (c.startupProbe?.periodSeconds ?? 10) * (c.startupProbe?.failureThreshold ?? 3);
  if (startBudget < 60) problems.push(`startupProbe allows only ${startBudget}s to start`);
  if (Number(config.ECHO_DRAIN_TIMEOUT_SECONDS ?? 10) >= grace) {
    problems.push(`drain timeout ${config.ECHO_DRAIN_TIMEOUT_SECONDS}s is not shorter than terminationGracePeriodSeconds ${grace}s`);
  }
  return problems;
}

export function checkRollout(objects) {
  const problems = [];
  const ds = daemonSet(objects);
  if (!ds) return [`no DaemonSet ${APP}`];
  const s = ds.spec.updateStrategy ?? {};
  if (s.type !== "RollingUpdate") problems.push(`updateStrategy is ${s.type}, not RollingUpdate`);
  if (s.rollingUpdate?.maxUnavailable !== 1) problems.push(`maxUnavailable is ${s.rollingUpdate?.maxUnavailable}, not 1`);
  const surge = s.rollingUpdate?.maxSurge ?? 0;
  if (surge !== 0 && surge !== "0%") problems.push(`maxSurge is ${surge}: two echods would share a node's socket`);
  const env = mainContainer(ds)?.env ?? [];
  const nodeName = env.find((e) => e.name === "NODE_NAME");
  if (nodeName?.valueFrom?.fieldRef?.fieldPath !== "spec.nodeName") problems.push("NODE_NAME does not come from spec.nodeName");
  const sel = ds.spec.selector?.matchLabels ?? {};
  const labels = ds.spec.template.metadata?.labels ?? {};
  for (const [k, v] of Object.entries(sel)) if (labels[k] !== v) problems.push(`pod template lacks selector label ${k}=${v}`);
  return problems;
}

// Volumes: profile cache and socket dir on the host, /tmp in memory/disk,
// nothing else of the host.
export function checkVolumes(objects) {
  const problems = [];
  const ds = daemonSet(objects);
  const c = mainContainer(ds);
  if (!c) return [`no container ${APP}`];
  const config = effectiveConfig(objects);
  const volumes = Object.fromEntries((ds.spec.template.spec.volumes ?? []).map((v) => [v.name, v]));
  const mountAt = (dir) => (c.volumeMounts ?? []).find((m) => m.mountPath === dir && !m.subPath);
  for (const v of Object.values(volumes)) {
    if (v.hostPath) {
      if (!ALLOWED_HOST_PATHS.some((re) => re.test(v.hostPath.path))) problems.push(`volume ${v.name} mounts host path ${v.hostPath.path}`);
      if (!["Directory", "DirectoryOrCreate"].includes(v.hostPath.type)) problems.push(`hostPath volume ${v.name} has type ${v.hostPath.type}, not a directory type`);
    }
  }
  const tmp = mountAt("/tmp");
  if (!tmp || !volumes[tmp.name]?.emptyDir) problems.push("/tmp is not an emptyDir");
  const cacheDir = config.ECHO_PROFILE_CACHE_DIR;
  const cache = cacheDir && mountAt(cacheDir);
  if (!cacheDir) problems.push("ECHO_PROFILE_CACHE_DIR is not set");
  else if (!cache) problems.push(`nothing is mounted at ECHO_PROFILE_CACHE_DIR ${cacheDir}`);
  else if (!volumes[cache.name]?.hostPath && !volumes[cache.name]?.persistentVolumeClaim) problems.push(`profile cache volume ${cache.name} is neither hostPath nor PVC`);
  else if (cache.readOnly) problems.push("profile cache is mounted read-only");
  const socket = config.ECHO_UNIX_SOCKET;
  const sock = socket && mountAt(path.posix.dirname(socket));
  if (!socket) problems.push("ECHO_UNIX_SOCKET is not set");
  else if (!sock) problems.push(`nothing is mounted at the socket directory ${path.posix.dirname(socket)}`);
  else if (volumes[sock.name]?.hostPath?.path !== "/run/echo") problems.push(`socket directory is not the node's /run/echo (${JSON.stringify(volumes[sock.name])})`);
  for (const m of c.volumeMounts ?? []) if (!volumes[m.name]) problems.push(`mount ${m.mountPath} uses undefined volume ${m.name}`);
  for (const ic of ds.spec.template.spec.initContainers ?? []) {
    for (const m of ic.volumeMounts ?? []) if (!volumes[m.name]) problems.push(`init mount ${m.mountPath} uses undefined volume ${m.name}`);
  }
  return problems;
}

// ECHO_* settings: only real flags, sane values, consistent with the pod.
export function checkConfig(objects, { tls }) {
  const problems = [];
  const ds = daemonSet(objects);
  const c = mainContainer(ds);
  if (!c) return [`no container ${APP}`];
  const refs = (c.envFrom ?? []).filter((s) => s.configMapRef).map((s) => s.configMapRef.name);
  if (refs.length === 0) problems.push("echod does not take its flags from a ConfigMap (envFrom)");
  for (const name of refs) {
    const cm = find(objects, "ConfigMap", name);
    if (!cm) {
      problems.push(`envFrom ConfigMap ${name} is not in the manifests`);
      continue;
    }
    for (const key of Object.keys(cm.data ?? {})) {
      if (!key.startsWith("ECHO_")) problems.push(`ConfigMap ${name}: ${key} does not start with ECHO_`);
      else if (!FLAG_ENV.has(key)) problems.push(`ConfigMap ${name}: ${key} is not an echod flag`);
    }
  }
  for (const e of c.env ?? []) {
    if (e.name.startsWith("ECHO_") && !FLAG_ENV.has(e.name)) problems.push(`env ${e.name} is not an echod flag`);
  }
  if ((c.envFrom ?? []).some((s) => s.prefix)) problems.push("envFrom with a prefix would rename the ECHO_* variables");
  const cfg = effectiveConfig(objects);
  const ports = Object.fromEntries((c.ports ?? []).map((p) => [p.name, p.containerPort]));
  if (ports.grpc !== GRPC_PORT) problems.push(`container port grpc is ${ports.grpc}, not ${GRPC_PORT}`);
  if (ports.metrics !== METRICS_PORT) problems.push(`container port metrics is ${ports.metrics}, not ${METRICS_PORT}`);
  const listen = (key, port) => {
    const addr = cfg[key];
    if (!addr) return problems.push(`${key} is not set (echod would listen on 127.0.0.1 only)`);
    if (portOf(addr) !== port) problems.push(`${key}=${addr} does not listen on port ${port}`);
    if (!["0.0.0.0", "[::]", ""].includes(hostOf(addr))) problems.push(`${key}=${addr} is not reachable from outside the pod`);
  };
  listen("ECHO_GRPC_ADDRESS", GRPC_PORT);
  listen("ECHO_METRICS_ADDRESS", METRICS_PORT);
  if (cfg.ECHO_LOG_LEVEL !== undefined && !LOG_LEVELS.has(cfg.ECHO_LOG_LEVEL)) problems.push(`ECHO_LOG_LEVEL ${cfg.ECHO_LOG_LEVEL} is not one of ${[...LOG_LEVELS]}`);
  if (cfg.ECHO_ENABLE_PROFILING !== undefined && !["true", "false"].includes(cfg.ECHO_ENABLE_PROFILING)) problems.push(`ECHO_ENABLE_PROFILING ${cfg.ECHO_ENABLE_PROFILING} is not true/false`);
  for (const key of ["ECHO_MAX_REQUEST_BYTES", "ECHO_MAX_CONCURRENT_REQUESTS", "ECHO_DRAIN_TIMEOUT_SECONDS"]) {
    if (cfg[key] !== undefined && !/^[1-9]\d*$/.test(cfg[key])) problems.push(`${key} ${cfg[key]} is not a positive integer`);
  }
  const fraction = Number(cfg.ECHO_PROFILE_MEMORY_FRACTION ?? 0.1);
  if (!(fraction > 0 && fraction <= 1)) problems.push(`ECHO_PROFILE_MEMORY_FRACTION ${cfg.ECHO_PROFILE_MEMORY_FRACTION} is not in (0, 1]`);
  const hasCert = cfg.ECHO_TLS_CERT_FILE !== undefined;
  const hasKey = cfg.ECHO_TLS_KEY_FILE !== undefined;
  if (hasCert !== hasKey) problems.push("only one of ECHO_TLS_CERT_FILE / ECHO_TLS_KEY_FILE is set: echod would serve plaintext");
  if (tls !== (hasCert && hasKey)) problems.push(tls ? "TLS overlay does not set ECHO_TLS_CERT_FILE/ECHO_TLS_KEY_FILE" : "plaintext overlay sets TLS files");
  // TLS overlays are mutual: clients must present a certificate.
  if (tls && cfg.ECHO_TLS_CLIENT_CA_FILE === undefined) problems.push("TLS overlay does not set ECHO_TLS_CLIENT_CA_FILE: any client could connect (no mTLS)");
  if (cfg.ECHO_TLS_CLIENT_CA_FILE !== undefined && !(hasCert && hasKey)) problems.push("ECHO_TLS_CLIENT_CA_FILE without ECHO_TLS_CERT_FILE/ECHO_TLS_KEY_FILE: echod refuses to start");
  if (hasCert && hasKey) {
    const volumes = Object.fromEntries((ds.spec.template.spec.volumes ?? []).map((v) => [v.name, v]));
    const files = ["ECHO_TLS_CERT_FILE", "ECHO_TLS_KEY_FILE", "ECHO_TLS_CLIENT_CA_FILE"].filter((k) => cfg[k] !== undefined);
    for (const key of files) {
      const file = cfg[key];
      const m = (c.volumeMounts ?? []).find((vm) => path.posix.dirname(file) === vm.mountPath);
      const secret = m && volumes[m.name]?.secret;
      if (!secret) problems.push(`${key}=${file} is not in a mounted Secret`);
      else if (secret.items && !secret.items.some((i) => i.path === path.posix.basename(file))) problems.push(`${key}: Secret volume has no item ${path.posix.basename(file)}`);
      else if (!secret.items && !["tls.crt", "tls.key", "ca.crt"].includes(path.posix.basename(file))) problems.push(`${key}=${file} is not a key of a kubernetes.io/tls Secret`);
    }
  }
  return problems;
}

export function checkService(objects) {
  const problems = [];
  const svc = find(objects, "Service", APP);
  if (!svc) return [`no Service ${APP}`];
  if (svc.spec.internalTrafficPolicy !== "Local") problems.push(`Service internalTrafficPolicy is ${svc.spec.internalTrafficPolicy}, not Local`);
  if (svc.spec.type && svc.spec.type !== "ClusterIP") problems.push(`Service type ${svc.spec.type} exposes echod beyond the cluster`);
  const ports = Object.fromEntries((svc.spec.ports ?? []).map((p) => [p.name, p]));
  const ds = daemonSet(objects);
  const cports = Object.fromEntries((mainContainer(ds)?.ports ?? []).map((p) => [p.name, p.containerPort]));
  for (const [name, port] of [["grpc", GRPC_PORT], ["metrics", METRICS_PORT]]) {
    const p = ports[name];
    if (!p) {
      problems.push(`Service has no port named ${name}`);
      continue;
    }
    if (p.port !== port) problems.push(`Service port ${name} is ${p.port}, not ${port}`);
    const target = typeof p.targetPort === "string" ? cports[p.targetPort] : (p.targetPort ?? p.port);
    if (target !== port) problems.push(`Service port ${name} targets ${p.targetPort}, which is not the container's ${port}`);
  }
  const labels = ds?.spec?.template?.metadata?.labels ?? {};
  const selector = svc.spec.selector ?? {};
  if (Object.keys(selector).length === 0) problems.push("Service has no selector");
  for (const [k, v] of Object.entries(selector)) if (labels[k] !== v) problems.push(`Service selector ${k}=${v} does not match the echod pods`);
  return problems;
}

// Monitoring objects present exactly where asked for (the plain and TLS
// overlays must apply on clusters without the Prometheus Operator CRDs).
export function checkMonitoringPresence(objects, { monitoring }) {
  const problems = [];
  const crs = objects.filter((o) => o.apiVersion?.startsWith("monitoring.coreos.com/"));
  const dashboards = findAll(objects, "ConfigMap").filter((cm) => cm.metadata?.labels?.grafana_dashboard === "1");
  if (!monitoring) {
    for (const o of crs) problems.push(`${o.kind}/${o.metadata.name} needs the Prometheus Operator CRDs`);
    return problems;
  }
  if (!find(objects, "PodMonitor") && !find(objects, "ServiceMonitor")) problems.push("no PodMonitor or ServiceMonitor");
  if (!find(objects, "PrometheusRule")) problems.push("no PrometheusRule");
  if (dashboards.length === 0) problems.push('no ConfigMap labelled grafana_dashboard: "1"');
  return problems;
}

// Profiling runs kernels on the node's GPUs: off unless a component turns it
// on, and then only for listed identities.
export function checkProfiling(objects, { profiling }) {
  const problems = [];
  const cfg = effectiveConfig(objects);
  const enabled = cfg.ECHO_ENABLE_PROFILING === "true";
  if (enabled !== profiling) problems.push(profiling ? "profiling is not enabled" : "profiling is enabled (ECHO_ENABLE_PROFILING=true) where it should be off");
  const allowed = (cfg.ECHO_PROFILE_ALLOWED_IDENTITIES ?? "").split(",").filter((s) => s.trim() !== "");
  if (enabled && allowed.length === 0) problems.push("profiling is enabled for every caller: set ECHO_PROFILE_ALLOWED_IDENTITIES");
  return problems;
}

// The NetworkPolicy admits gRPC from labelled client pods in labelled
// namespaces, metrics (a separate port) from labelled namespaces, and
// nothing else; echod needs no egress.
export function checkNetworkPolicy(objects) {
  const problems = [];
  const ds = daemonSet(objects);
  const podLabels = ds?.spec?.template?.metadata?.labels ?? {};
  const policies = findAll(objects, "NetworkPolicy").filter((np) => {
    const want = np.spec?.podSelector?.matchLabels ?? {};
    return Object.keys(want).length > 0 && Object.entries(want).every(([k, v]) => podLabels[k] === v);
  });
  if (policies.length === 0) return ["no NetworkPolicy selects the echod pods"];
  const cports = Object.fromEntries((mainContainer(ds)?.ports ?? []).map((p) => [p.name, p.containerPort]));
  if (cports.grpc === cports.metrics) problems.push("metrics and gRPC share a port");
  const portNumber = (p) => (typeof p.port === "string" ? cports[p.port] : p.port);
  const admitted = { [GRPC_PORT]: [], [METRICS_PORT]: [] };
  for (const np of policies) {
    const name = `NetworkPolicy ${np.metadata.name}`;
    const types = np.spec.policyTypes ?? ["Ingress"];
    if (!types.includes("Ingress")) problems.push(`${name} does not restrict ingress`);
    if (!types.includes("Egress") || (np.spec.egress ?? []).length > 0) problems.push(`${name} allows egress, which echod never needs`);
    for (const [i, rule] of (np.spec.ingress ?? []).entries()) {
      const where = `${name} ingress rule ${i + 1}`;
      if (!(rule.ports?.length > 0)) problems.push(`${where} admits every port`);
      if (!(rule.from?.length > 0)) problems.push(`${where} admits every source`);
      for (const peer of rule.from ?? []) {
        if (peer.ipBlock) problems.push(`${where} admits an ipBlock ${peer.ipBlock.cidr}`);
        const nsLabels = peer.namespaceSelector?.matchLabels ?? {};
        if (!peer.ipBlock && Object.keys(nsLabels).length === 0) problems.push(`${where} admits pods of every namespace (no namespaceSelector labels)`);
      }
      for (const p of rule.ports ?? []) {
        const port = portNumber(p);
        if (!(port in admitted)) problems.push(`${where} opens port ${p.port}, which echod does not serve`);
        else admitted[port].push(rule);
      }
    }
  }
  if (admitted[GRPC_PORT].length === 0) problems.push(`no NetworkPolicy rule admits gRPC (${GRPC_PORT}): nobody could call echod`);
  for (const rule of admitted[GRPC_PORT]) {
    if (rule.ports.some((p) => portNumber(p) === METRICS_PORT)) problems.push("gRPC and metrics are admitted by one rule: scrapers could call echod");
    for (const peer of rule.from ?? []) {
      if (Object.keys(peer.podSelector?.matchLabels ?? {}).length === 0) problems.push("gRPC is admitted from every pod of a namespace (no podSelector labels)");
    }
  }
  return problems;
}
