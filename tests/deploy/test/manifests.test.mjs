// Renders every overlay (and the components combined) and checks the objects
// against the Kubernetes schemas and the properties the deployment promises.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { kustomizations, renderOverlay, renderWithComponents, kustomize, k8sDir } from "../lib/render.mjs";
import { validateAll } from "../lib/schema.mjs";
import {
  checkConfig, checkGpuPlacement, checkImages, checkMonitoringPresence, checkNamespaces,
  checkNetworkPolicy, checkProbes, checkProfiling, checkRollout, checkSecurity, checkService,
  checkVolumes,
} from "../lib/checks.mjs";
import { checkDashboards, checkRules, checkScrape } from "../lib/monitoring.mjs";

// What each shipped overlay is: any other overlay must be added here.
const OVERLAYS = {
  plain: { tls: false, monitoring: false, profiling: false },
  tls: { tls: true, monitoring: false, profiling: false },
  monitoring: { tls: false, monitoring: true, profiling: false },
};

const targets = [
  ...Object.entries(OVERLAYS).map(([name, expect]) => ({ name: `overlay ${name}`, expect, render: () => renderOverlay(name) })),
  {
    name: "components tls + monitoring + nvidia-runtime",
    expect: { tls: true, monitoring: true, profiling: false },
    render: () => renderWithComponents(["tls", "monitoring", "nvidia-runtime"]),
  },
  {
    name: "components tls + profiling",
    expect: { tls: true, monitoring: false, profiling: true },
    render: () => renderWithComponents(["tls", "profiling"]),
  },
];

test("every overlay directory is known to these tests", () => {
  assert.deepEqual(kustomizations("overlays"), Object.keys(OVERLAYS).sort());
});

test("the base renders on its own", () => {
  const objects = kustomize(`${k8sDir}/base`);
  assert.ok(objects.some((o) => o.kind === "DaemonSet"));
});

for (const target of targets) {
  describe(target.name, () => {
    const objects = target.render();
    const { expect } = target;

    test("objects are valid against the Kubernetes / Prometheus Operator schemas, no unknown fields", async () => {
      assert.ok(objects.length > 0);
      assert.deepEqual(await validateAll(objects), []);
    });
    test("everything lives in namespace echo, no duplicates", () => {
      assert.deepEqual(checkNamespaces(objects), []);
    });
    test("image is pinned and shared by all containers", () => {
      assert.deepEqual(checkImages(objects), []);
    });
    test("DaemonSet lands on NVIDIA GPU nodes only, tolerates their taint, claims no GPU", () => {
      assert.deepEqual(checkGpuPlacement(objects), []);
    });
    test("pod is hardened (non-root, read-only root fs, no escalation, caps dropped, seccomp, no token)", () => {
      assert.deepEqual(checkSecurity(objects), []);
    });
    test(expect.tls ? "probes use echoctl over the Unix socket (kubelet gRPC probes cannot do TLS)"
      : "probes are native gRPC probes on port 50051", () => {
      assert.deepEqual(checkProbes(objects, expect), []);
    });
    test("rolling update takes at most one node's echod down; NODE_NAME from the downward API", () => {
      assert.deepEqual(checkRollout(objects), []);
    });
    test("profile cache and socket dir are host directories, /tmp is an emptyDir", () => {
      assert.deepEqual(checkVolumes(objects), []);
    });
    test("flags come from a ConfigMap of ECHO_* variables that echod knows, consistent with the pod", () => {
      assert.deepEqual(checkConfig(objects, expect), []);
    });
    test("NetworkPolicy: gRPC from labelled client pods only, metrics on its own port from labelled namespaces, no egress", () => {
      assert.deepEqual(checkNetworkPolicy(objects), []);
    });
    test(expect.profiling ? "profiling is on for listed identities only" : "profiling is off", () => {
      assert.deepEqual(checkProfiling(objects, expect), []);
    });
    test("Service is node-local with named grpc 50051 and metrics 9464 ports", () => {
      assert.deepEqual(checkService(objects), []);
    });
    test(expect.monitoring ? "ships PodMonitor, PrometheusRule and a Grafana dashboard"
      : "needs no Prometheus Operator CRDs", () => {
      assert.deepEqual(checkMonitoringPresence(objects, expect), []);
    });
    if (expect.monitoring) {
      test("PodMonitor scrapes the metrics port of the echod pods, with the node label", () => {
        assert.deepEqual(checkScrape(objects), []);
      });
      test("alert rules parse, read real echod series and cover down / errors / latency / profiling", () => {
        assert.deepEqual(checkRules(objects), []);
      });
      test("Grafana dashboard is valid and covers memory saved, plans, latency, errors, profile cache", () => {
        assert.deepEqual(checkDashboards(objects), []);
      });
    }
  });
}
