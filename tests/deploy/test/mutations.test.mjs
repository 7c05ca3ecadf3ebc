// The checks must bite: each case breaks one property in a copy of the
// rendered manifests (or of the Dockerfile text) and expects the matching
// check to report it.
import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, test } from "node:test";
import { renderOverlay } from "../lib/render.mjs";
import { validateAll } from "../lib/schema.mjs";
import {
  checkConfig, checkGpuPlacement, checkImages, checkMonitoringPresence, checkNamespaces,
  checkNetworkPolicy, checkProbes, checkProfiling, checkRollout, checkSecurity, checkService,
  checkVolumes, daemonSet, mainContainer,
} from "../lib/checks.mjs";
import { checkDashboards, checkRules, checkScrape } from "../lib/monitoring.mjs";
import { checkDockerfile, checkShellSyntax, dockerfilePath } from "../lib/dockerfile.mjs";

const rendered = Object.fromEntries(["plain", "tls", "monitoring"].map((o) => [o, renderOverlay(o)]));
const clone = (overlay) => structuredClone(rendered[overlay]);

const pod = (objs) => daemonSet(objs).spec.template.spec;
const echod = (objs) => mainContainer(daemonSet(objs));
const configMap = (objs) => objs.find((o) => o.kind === "ConfigMap" && o.data?.ECHO_GRPC_ADDRESS);
const service = (objs) => objs.find((o) => o.kind === "Service");
const policy = (objs) => objs.find((o) => o.kind === "NetworkPolicy");
const ingress = (objs, port) => policy(objs).spec.ingress.find((r) => r.ports.some((p) => p.port === port));
const rule = (objs, name) => objs.find((o) => o.kind === "PrometheusRule").spec.groups
  .flatMap((g) => g.rules).find((r) => r.alert === name);
const dashboard = (objs, edit) => {
  const cm = objs.find((o) => o.metadata?.labels?.grafana_dashboard === "1");
  const key = Object.keys(cm.data)[0];
  const d = JSON.parse(cm.data[key]);
  edit(d);
  cm.data[key] = JSON.stringify(d);
};
const plain = { tls: false, monitoring: false };
const tls = { tls: true, monitoring: false };
const monitoring = { tls: false, monitoring: true };

const manifestCases = [
  ["probe on another port", "plain", (o) => { echod(o).livenessProbe.grpc.port = 50052; }, (o) => checkProbes(o, plain), /not 50051/],
  ["TCP instead of gRPC probe", "plain", (o) => { echod(o).readinessProbe = { tcpSocket: { port: 50051 }, periodSeconds: 5, timeoutSeconds: 1 }; }, (o) => checkProbes(o, plain), /not a native gRPC probe/],
  ["probe for an unknown health service", "plain", (o) => { echod(o).readinessProbe.grpc.service = "echo.v1.Nope"; }, (o) => checkProbes(o, plain), /health service/],
  ["no startup probe", "plain", (o) => { delete echod(o).startupProbe; }, (o) => checkProbes(o, plain), /no startupProbe/],
  ["drain longer than the grace period", "plain", (o) => { configMap(o).data.ECHO_DRAIN_TIMEOUT_SECONDS = "45"; }, (o) => checkProbes(o, plain), /terminationGracePeriodSeconds/],
  ["gRPC probe under TLS", "tls", (o) => { echod(o).livenessProbe = { grpc: { port: 50051 }, periodSeconds: 10, timeoutSeconds: 2 }; }, (o) => checkProbes(o, tls), /cannot speak TLS/],
  ["exec probe on the wrong socket", "tls", (o) => { echod(o).livenessProbe.exec.command[2] = "unix:///tmp/x.sock"; }, (o) => checkProbes(o, tls), /not \[/],
  ["writable root filesystem", "plain", (o) => { echod(o).securityContext.readOnlyRootFilesystem = false; }, checkSecurity, /readOnlyRootFilesystem/],
  ["privilege escalation allowed", "plain", (o) => { delete echod(o).securityContext.allowPrivilegeEscalation; }, checkSecurity, /allowPrivilegeEscalation/],
  ["capabilities kept", "plain", (o) => { echod(o).securityContext.capabilities.drop = []; }, checkSecurity, /drop ALL/],
  ["added capability", "plain", (o) => { echod(o).securityContext.capabilities.add = ["NET_ADMIN"]; }, checkSecurity, /adds capabilities NET_ADMIN/],
  ["pod may run as root", "plain", (o) => { pod(o).securityContext.runAsNonRoot = false; }, checkSecurity, /runAsNonRoot/],
  ["echod container as root", "plain", (o) => { echod(o).securityContext.runAsUser = 0; }, checkSecurity, /container echod: runs as root/],
  ["service account token mounted", "plain", (o) => { pod(o).automountServiceAccountToken = true; }, checkSecurity, /automountServiceAccountToken/],
  ["seccomp unconfined", "plain", (o) => { pod(o).securityContext.seccompProfile.type = "Unconfined"; }, checkSecurity, /RuntimeDefault/],
  ["root init container with more than chown", "plain", (o) => { pod(o).initContainers[0].securityContext.capabilities.add.push("SYS_ADMIN"); }, checkSecurity, /more than chown/],
  ["host network", "plain", (o) => { pod(o).hostNetwork = true; }, checkSecurity, /hostNetwork/],
  ["no memory limit", "plain", (o) => { delete echod(o).resources.limits.memory; }, checkSecurity, /no memory limit/],
  ["claims a GPU", "plain", (o) => { echod(o).resources.limits["nvidia.com/gpu"] = 1; }, checkGpuPlacement, /claims nvidia.com\/gpu/],
  ["no node affinity", "plain", (o) => { delete pod(o).affinity; }, checkGpuPlacement, /no required node affinity/],
  ["an affinity term that admits any node", "plain", (o) => { pod(o).affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.push({ matchExpressions: [{ key: "kubernetes.io/os", operator: "In", values: ["linux"] }] }); }, checkGpuPlacement, /term 2 does not require an NVIDIA/],
  ["no GPU toleration", "plain", (o) => { pod(o).tolerations = []; }, checkGpuPlacement, /toleration/],
  ["GPU toleration for one taint value only", "plain", (o) => { pod(o).tolerations = [{ key: "nvidia.com/gpu", operator: "Equal", value: "present", effect: "NoSchedule" }]; }, checkGpuPlacement, /toleration/],
  ["only some GPUs visible", "plain", (o) => { echod(o).env.find((e) => e.name === "NVIDIA_VISIBLE_DEVICES").value = "0"; }, checkGpuPlacement, /NVIDIA_VISIBLE_DEVICES/],
  ["driver capabilities without utility", "plain", (o) => { echod(o).env.find((e) => e.name === "NVIDIA_DRIVER_CAPABILITIES").value = "compute"; }, checkGpuPlacement, /lacks utility/],
  ["cluster-wide Service traffic", "plain", (o) => { service(o).spec.internalTrafficPolicy = "Cluster"; }, checkService, /internalTrafficPolicy/],
  ["Service on another port", "plain", (o) => { service(o).spec.ports[0].port = 50052; }, checkService, /port grpc is 50052/],
  ["unnamed metrics port", "plain", (o) => { service(o).spec.ports[1].name = "http"; }, checkService, /no port named metrics/],
  ["Service selects other pods", "plain", (o) => { service(o).spec.selector = { app: "other" }; }, checkService, /does not match/],
  ["NodePort Service", "plain", (o) => { service(o).spec.type = "NodePort"; }, checkService, /NodePort/],
  ["non-ECHO_ variable in the ConfigMap", "plain", (o) => { configMap(o).data.LOG_LEVEL = "info"; }, (o) => checkConfig(o, plain), /does not start with ECHO_/],
  ["unknown flag in the ConfigMap", "plain", (o) => { configMap(o).data.ECHO_VERBOSE = "1"; }, (o) => checkConfig(o, plain), /ECHO_VERBOSE is not an echod flag/],
  ["gRPC on loopback only", "plain", (o) => { configMap(o).data.ECHO_GRPC_ADDRESS = "127.0.0.1:50051"; }, (o) => checkConfig(o, plain), /not reachable/],
  ["metrics on another port", "plain", (o) => { configMap(o).data.ECHO_METRICS_ADDRESS = "0.0.0.0:9000"; }, (o) => checkConfig(o, plain), /port 9464/],
  ["bad log level", "plain", (o) => { configMap(o).data.ECHO_LOG_LEVEL = "verbose"; }, (o) => checkConfig(o, plain), /ECHO_LOG_LEVEL/],
  ["flags not from a ConfigMap", "plain", (o) => { delete echod(o).envFrom; }, (o) => checkConfig(o, plain), /envFrom/],
  ["half of the TLS settings", "tls", (o) => { delete configMap(o).data.ECHO_TLS_KEY_FILE; }, (o) => checkConfig(o, tls), /only one of/],
  ["TLS key outside the Secret", "tls", (o) => { configMap(o).data.ECHO_TLS_KEY_FILE = "/etc/other/tls.key"; }, (o) => checkConfig(o, tls), /not in a mounted Secret/],
  ["TLS without client certificates", "tls", (o) => { delete configMap(o).data.ECHO_TLS_CLIENT_CA_FILE; }, (o) => checkConfig(o, tls), /no mTLS/],
  ["client CA outside the Secret", "tls", (o) => { configMap(o).data.ECHO_TLS_CLIENT_CA_FILE = "/etc/ca.crt"; }, (o) => checkConfig(o, tls), /ECHO_TLS_CLIENT_CA_FILE=\/etc\/ca.crt is not in a mounted Secret/],
  ["client CA without a server certificate", "plain", (o) => { configMap(o).data.ECHO_TLS_CLIENT_CA_FILE = "/etc/echo/tls/ca.crt"; }, (o) => checkConfig(o, plain), /refuses to start/],
  ["profiling on in the base", "plain", (o) => { configMap(o).data.ECHO_ENABLE_PROFILING = "true"; }, (o) => checkProfiling(o, { profiling: false }), /should be off/],
  ["profiling for everyone", "plain", (o) => { configMap(o).data.ECHO_ENABLE_PROFILING = "true"; }, (o) => checkProfiling(o, { profiling: true }), /every caller/],
  ["no NetworkPolicy", "plain", (o) => { o.splice(o.indexOf(policy(o)), 1); }, checkNetworkPolicy, /no NetworkPolicy selects/],
  ["NetworkPolicy for other pods", "plain", (o) => { policy(o).spec.podSelector.matchLabels = { app: "other" }; }, checkNetworkPolicy, /no NetworkPolicy selects/],
  ["gRPC from every source", "plain", (o) => { delete ingress(o, "grpc").from; }, checkNetworkPolicy, /admits every source/],
  ["gRPC from every pod of the namespace", "plain", (o) => { delete ingress(o, "grpc").from[0].podSelector; }, checkNetworkPolicy, /no podSelector/],
  ["gRPC from every namespace", "plain", (o) => { ingress(o, "grpc").from[0].namespaceSelector = {}; }, checkNetworkPolicy, /every namespace/],
  ["gRPC from anywhere by IP", "plain", (o) => { ingress(o, "grpc").from.push({ ipBlock: { cidr: "0.0.0.0/0" } }); }, checkNetworkPolicy, /ipBlock 0.0.0.0\/0/],
  ["scrapers may call gRPC", "plain", (o) => { ingress(o, "metrics").ports.push({ port: "grpc", protocol: "TCP" }); }, checkNetworkPolicy, /one rule/],
  ["all ports open", "plain", (o) => { delete ingress(o, "metrics").ports; }, checkNetworkPolicy, /every port/],
  ["egress allowed", "plain", (o) => { policy(o).spec.egress = [{}]; }, checkNetworkPolicy, /allows egress/],
  ["metrics on the gRPC port", "plain", (o) => { echod(o).ports.find((p) => p.name === "metrics").containerPort = 50051; }, checkNetworkPolicy, /share a port/],
  ["maxUnavailable 2", "plain", (o) => { daemonSet(o).spec.updateStrategy.rollingUpdate.maxUnavailable = 2; }, checkRollout, /maxUnavailable is 2/],
  ["surge", "plain", (o) => { daemonSet(o).spec.updateStrategy.rollingUpdate.maxSurge = 1; }, checkRollout, /maxSurge/],
  ["OnDelete updates", "plain", (o) => { daemonSet(o).spec.updateStrategy = { type: "OnDelete" }; }, checkRollout, /OnDelete/],
  ["no NODE_NAME", "plain", (o) => { echod(o).env = echod(o).env.filter((e) => e.name !== "NODE_NAME"); }, checkRollout, /NODE_NAME/],
  ["no /tmp emptyDir", "plain", (o) => { echod(o).volumeMounts = echod(o).volumeMounts.filter((m) => m.mountPath !== "/tmp"); }, checkVolumes, /\/tmp is not an emptyDir/],
  ["host root mounted", "plain", (o) => { pod(o).volumes.find((v) => v.hostPath).hostPath.path = "/"; }, checkVolumes, /mounts host path \/$/],
  ["profile cache not mounted", "plain", (o) => { configMap(o).data.ECHO_PROFILE_CACHE_DIR = "/cache"; }, checkVolumes, /nothing is mounted at ECHO_PROFILE_CACHE_DIR/],
  ["socket outside /run/echo", "plain", (o) => { configMap(o).data.ECHO_UNIX_SOCKET = "/tmp/echod.sock"; }, checkVolumes, /not the node's \/run\/echo/],
  ["latest image", "plain", (o) => { for (const c of [...pod(o).containers, ...pod(o).initContainers]) c.image = "echod:latest"; }, checkImages, /no fixed tag/],
  ["object outside the namespace", "monitoring", (o) => { o.find((x) => x.kind === "PodMonitor").metadata.namespace = "monitoring"; }, checkNamespaces, /PodMonitor\/echod is in namespace monitoring/],
  ["Prometheus Operator object in the plain overlay", "plain", (o) => { o.push(structuredClone(rendered.monitoring.find((x) => x.kind === "PodMonitor"))); }, (o) => checkMonitoringPresence(o, plain), /needs the Prometheus Operator CRDs/],
  ["no dashboard in the monitoring overlay", "monitoring", (o) => { delete o.find((x) => x.metadata?.labels?.grafana_dashboard).metadata.labels.grafana_dashboard; }, (o) => checkMonitoringPresence(o, monitoring), /grafana_dashboard/],
  ["PodMonitor on an unnamed port", "monitoring", (o) => { o.find((x) => x.kind === "PodMonitor").spec.podMetricsEndpoints[0].port = "http"; }, checkScrape, /does not name/],
  ["PodMonitor without node label", "monitoring", (o) => { o.find((x) => x.kind === "PodMonitor").spec.podMetricsEndpoints[0].relabelings = []; }, checkScrape, /node name/],
  ["alert on a misspelt metric", "monitoring", (o) => { const r = rule(o, "EchodPlanErrors"); r.expr = r.expr.replaceAll("echo_plans_total", "echo_plan_total"); }, checkRules, /unknown metric echo_plan_total/],
  ["alert on a non-existent label value", "monitoring", (o) => { const r = rule(o, "EchodPlanErrors"); r.expr = r.expr.replace('outcome="error"', 'outcome="failed"'); }, checkRules, /"failed" is not a value of outcome/],
  ["alert on a raw counter", "monitoring", (o) => { rule(o, "EchodDown").expr = 'echo_requests_total{job="echod"} > 0'; }, checkRules, /read it through rate/],
  ["alert PromQL syntax error", "monitoring", (o) => { const r = rule(o, "EchodProfileFailures"); r.expr = r.expr.replace(") > 0.1", " > 0.1"); }, checkRules, /syntax error/],
  ["no profile failure alert", "monitoring", (o) => { for (const pr of o.filter((x) => x.kind === "PrometheusRule")) for (const g of pr.spec.groups) g.rules = g.rules.filter((r) => r.alert !== "EchodProfileFailures"); }, checkRules, /no alert for profile failures/],
  ["alert without for", "monitoring", (o) => { delete rule(o, "EchodDown").for; }, checkRules, /EchodDown: no "for"/],
  ["overlapping dashboard panels", "monitoring", (o) => dashboard(o, (d) => { d.panels[2].gridPos = { ...d.panels[1].gridPos }; }), checkDashboards, /overlap/],
  ["dashboard groups by a label the metric lacks", "monitoring", (o) => dashboard(o, (d) => { const p = d.panels.find((x) => x.title === "Plans by policy and outcome"); p.targets[0].expr = p.targets[0].expr.replace("by (policy, outcome)", "by (policy, code)"); }), checkDashboards, /has label code/],
  ["dashboard without latency panels", "monitoring", (o) => dashboard(o, (d) => { d.panels = d.panels.filter((p) => !JSON.stringify(p).includes("echo_request_duration_seconds")); }), checkDashboards, /no panel for latency/],
];

describe("manifest checks catch broken manifests", () => {
  for (const [name, overlay, mutate, check, expected] of manifestCases) {
    test(name, () => {
      const objs = clone(overlay);
      assert.deepEqual(check(clone(overlay)).filter((p) => expected.test(p)), [], "the unbroken manifests already fail");
      mutate(objs);
      const problems = check(objs);
      assert.ok(problems.some((p) => expected.test(p)), `expected a problem matching ${expected}, got ${JSON.stringify(problems)}`);
    });
  }
});

describe("schema validation catches invalid objects", () => {
  test("misspelt field", async () => {
    const objs = clone("plain");
    const sc = echod(objs).securityContext;
    sc.readOnlyRootFileSystem = sc.readOnlyRootFilesystem;
    delete sc.readOnlyRootFilesystem;
    const problems = await validateAll(objs);
    assert.ok(problems.some((p) => /unknown field .*readOnlyRootFileSystem/.test(p)), JSON.stringify(problems));
  });
  test("wrong type", async () => {
    const objs = clone("plain");
    echod(objs).livenessProbe.grpc.port = "50051";
    const problems = await validateAll(objs);
    assert.ok(problems.some((p) => /grpc\/port must be integer/.test(p)), JSON.stringify(problems));
  });
  test("misspelt Prometheus Operator field", async () => {
    const objs = clone("monitoring");
    const pm = objs.find((x) => x.kind === "PodMonitor");
    pm.spec.podMetricEndpoints = pm.spec.podMetricsEndpoints;
    delete pm.spec.podMetricsEndpoints;
    const problems = await validateAll(objs);
    assert.ok(problems.some((p) => /podMetric/.test(p)), JSON.stringify(problems));
  });
  test("unknown kind", async () => {
    const problems = await validateAll([{ apiVersion: "example.com/v1", kind: "Thing", metadata: { name: "x" } }]);
    assert.ok(problems.some((p) => /no schema/.test(p)));
  });
});

const dockerfile = fs.readFileSync(dockerfilePath, "utf8");
const finalStageStart = dockerfile.lastIndexOf("\nFROM ");
const inFinalStage = (from, to) =>
  dockerfile.slice(0, finalStageStart) + dockerfile.slice(finalStageStart).replace(from, to);

const dockerCases = [
  ["a syntax directive", "# syntax=docker/dockerfile:1.7\n" + dockerfile, checkDockerfile, /pulled from a registry/],
  ["no HEALTHCHECK", dockerfile.replace(/^HEALTHCHECK[\s\S]*?fi\n/m, ""), checkDockerfile, /no HEALTHCHECK/],
  ["HEALTHCHECK without echoctl", dockerfile.replace(/^HEALTHCHECK[\s\S]*?fi\n/m, "HEALTHCHECK --interval=30s --timeout=5s --start-period=5s CMD curl -f localhost:9464/metrics\n"), checkDockerfile, /echoctl/],
  ["root USER", dockerfile.replace(/^USER .*$/m, "USER root"), checkDockerfile, /not a numeric non-root uid/],
  ["no USER", dockerfile.replace(/^USER .*$/m, ""), checkDockerfile, /no USER/],
  ["single stage", dockerfile.slice(0, finalStageStart), checkDockerfile, /expected a build stage and a runtime stage/],
  ["toolchain in the runtime image", inFinalStage("libgrpc++1.51 ", "libgrpc++1.51 libgrpc++-dev "), checkDockerfile, /runtime stage installs build package libgrpc\+\+-dev/],
  ["runtime without cuDNN", inFinalStage(/"libcudnn9-cuda-[^"]*" /, ""), checkDockerfile, /does not install libcudnn9-cuda-/],
  ["runtime without a library", inFinalStage("libspdlog1.10 ", ""), checkDockerfile, /does not install libspdlog1.10/],
  ["unknown ECHO_ variable", inFinalStage("ENV ECHO_GRPC_ADDRESS", "ENV ECHO_BOGUS=1 ECHO_GRPC_ADDRESS"), checkDockerfile, /ECHO_BOGUS/],
  ["port not exposed", dockerfile.replace(/^EXPOSE .*$/m, "EXPOSE 50051"), checkDockerfile, /EXPOSE 9464/],
  ["COPY from an unknown stage", dockerfile.replace("COPY --from=build", "COPY --from=builder"), checkDockerfile, /--from=builder is not an earlier stage/],
  ["shell syntax error", dockerfile.replace(/\bfi; \\\n    cmake -S/, "; \\\n    cmake -S"), checkShellSyntax, /bash -n/],
];

describe("Dockerfile checks catch broken Dockerfiles", () => {
  for (const [name, text, check, expected] of dockerCases) {
    test(name, () => {
      assert.notEqual(text, dockerfile, "the mutation did not change the Dockerfile");
      const problems = check(text);
      assert.ok(problems.some((p) => expected.test(p)), `expected a problem matching ${expected}, got ${JSON.stringify(problems)}`);
    });
  }
});
