// With echod and echoctl built here (build/bin, or $ECHO_BIN_DIR), runs echod
// on loopback with an overlay's ConfigMap (addresses and host paths moved to
// free ports and a temp dir) and checks what the manifests and the image rely
// on: the values parse, the HEALTHCHECK and the probes pass, the metrics the
// alerts read are the ones exported, SIGTERM ends echod within the pod's grace
// period, and with the TLS overlay the TCP port speaks mutual TLS while the
// Unix socket the probes use stays plaintext. Skipped when nothing is built.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { daemonSet, effectiveConfig, mainContainer } from "../lib/checks.mjs";
import { dockerfilePath, healthcheckCommand, runHealthcheck } from "../lib/dockerfile.mjs";
import { resolveMetric } from "../lib/promql.mjs";
import { renderOverlay, repoRoot } from "../lib/render.mjs";

const binDir = process.env.ECHO_BIN_DIR ?? path.join(repoRoot, "build", "bin");
const echodBin = path.join(binDir, "echod");
const echoctlBin = path.join(binDir, "echoctl");
const missing = [echodBin, echoctlBin].filter((f) => !fs.existsSync(f));
const notBuilt = missing.length > 0 && `not built: ${missing.join(", ")}`;
const noOpenssl = spawnSync("openssl", ["version"]).status !== 0 && "openssl not found";

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// grpc.health.v1.Health/Check over plaintext HTTP/2, as the kubelet's native
// gRPC probe makes it. Resolves to the status (1 = SERVING), rejects on a
// gRPC error (e.g. NOT_FOUND for a service the server does not know).
function grpcHealthCheck(port, service) {
  const name = Buffer.from(service, "utf8");
  const message = name.length > 0 ? Buffer.concat([Buffer.from([0x0a, name.length]), name]) : Buffer.alloc(0);
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  message.copy(frame, 5);
  return new Promise((resolve, reject) => {
    const client = http2.connect(`http://127.0.0.1:${port}`);
    client.once("error", reject);
    const req = client.request({
      ":method": "POST",
      ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/grpc",
      te: "trailers",
    });
    const chunks = [];
    let headers = {};
    let trailers = {};
    req.on("response", (h) => { headers = h; });
    req.on("data", (c) => chunks.push(c));
    req.on("trailers", (t) => { trailers = t; });
    req.on("error", reject);
    req.on("end", () => {
      client.close();
      const body = Buffer.concat(chunks);
      // A "Trailers-Only" error response carries the status in the headers.
      const status = trailers["grpc-status"] ?? headers["grpc-status"];
      const text = trailers["grpc-message"] ?? headers["grpc-message"] ?? "";
      if (status !== "0") return reject(new Error(`grpc-status ${status}: ${text}`));
      // HealthCheckResponse { status = 1 }: field 1, varint.
      const msg = body.subarray(5);
      resolve(msg.length >= 2 && msg[0] === 0x08 ? msg[1] : 0);
    });
    req.end(frame);
  });
}

// Starts echod with the overlay's ECHO_* settings, relocated for this machine.
async function startEchod(objects, { tlsDir } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "echo-live-"));
  const ports = { grpc: await freePort(), metrics: await freePort() };
  const config = effectiveConfig(objects);
  const socketDir = path.join(dir, "run-echo");
  const cacheDir = path.join(dir, "profile-cache");
  fs.mkdirSync(socketDir);
  fs.mkdirSync(cacheDir);
  const env = {
    ...config,
    ECHO_GRPC_ADDRESS: config.ECHO_GRPC_ADDRESS.replace(/^.*:(\d+)$/, `127.0.0.1:${ports.grpc}`),
    ECHO_METRICS_ADDRESS: config.ECHO_METRICS_ADDRESS.replace(/^.*:(\d+)$/, `127.0.0.1:${ports.metrics}`),
    ECHO_UNIX_SOCKET: path.join(socketDir, path.basename(config.ECHO_UNIX_SOCKET)),
    ECHO_PROFILE_CACHE_DIR: cacheDir,
    NODE_NAME: "test-node",
    HOME: dir,
    PATH: `${binDir}:/usr/bin:/bin`,
  };
  if (tlsDir) {
    for (const key of ["ECHO_TLS_CERT_FILE", "ECHO_TLS_KEY_FILE", "ECHO_TLS_CLIENT_CA_FILE"]) {
      if (config[key] !== undefined) env[key] = path.join(tlsDir, path.basename(config[key]));
    }
  }
  const child = spawn(echodBin, [], { env, stdio: ["ignore", "pipe", "pipe"] });
  const server = { dir, env, ports, child, log: "" };
  child.stdout.on("data", (d) => { server.log += d; });
  child.stderr.on("data", (d) => { server.log += d; });
  server.exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  server.stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await server.exited;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) break;
    const r = spawnSync(echoctlBin, ["--server", `unix://${env.ECHO_UNIX_SOCKET}`, "--timeout_seconds", "1", "health"], { encoding: "utf8" });
    if (r.status === 0) return server;
    await sleep(200);
  }
  await sleep(100);
  const log = server.log;
  await server.stop();
  throw new Error(`echod did not become SERVING with the overlay's settings:\n${log}`);
}

// The exec probe of an overlay, pointed at the test's socket.
function probeCommand(objects, probe, socket) {
  return mainContainer(daemonSet(objects))[probe].exec.command.map((a) => (a.startsWith("unix://") ? `unix://${socket}` : a));
}

describe("echod started with the plain overlay's configuration", { skip: notBuilt }, () => {
  const plain = renderOverlay("plain");
  const grace = daemonSet(plain).spec.template.spec.terminationGracePeriodSeconds;
  let server;

  before(async () => { server = await startEchod(plain); });
  after(async () => { await server?.stop(); });

  test("the image's HEALTHCHECK passes (Unix socket and TCP variants)", () => {
    const text = fs.readFileSync(dockerfilePath, "utf8");
    const viaSocket = spawnSync("sh", ["-c", healthcheckCommand(text)], { env: server.env, encoding: "utf8" });
    assert.equal(viaSocket.status, 0, viaSocket.stderr + viaSocket.stdout);
    const tcpEnv = { ...server.env, ECHO_UNIX_SOCKET: "" };
    assert.deepEqual(runHealthcheck(text, tcpEnv).args, ["--server", `127.0.0.1:${server.ports.grpc}`, "health"]);
    const viaTcp = spawnSync("sh", ["-c", healthcheckCommand(text)], { env: tcpEnv, encoding: "utf8" });
    assert.equal(viaTcp.status, 0, viaTcp.stderr + viaTcp.stdout);
  });

  for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
    test(`the native ${probe} (grpc.health.v1 on the probed port and service) gets SERVING`, async () => {
      const { grpc } = mainContainer(daemonSet(plain))[probe];
      // The probe's port is the container's; here echod listens on a free one.
      assert.equal(grpc.port, Number(effectiveConfig(plain).ECHO_GRPC_ADDRESS.split(":").pop()));
      assert.equal(await grpcHealthCheck(server.ports.grpc, grpc.service ?? ""), 1);
    });
  }

  test("the health check fails for a service echod does not serve (so the probes test something)", async () => {
    await assert.rejects(grpcHealthCheck(server.ports.grpc, "echo.v1.NoSuchService"), /grpc-status 5\b/); // NOT_FOUND
  });

  test("the Unix socket is for echod's user and group only (hooks join the group)", () => {
    const stat = fs.statSync(server.env.ECHO_UNIX_SOCKET);
    assert.equal((stat.mode & 0o777).toString(8), "660");
    assert.equal(stat.gid, process.getgid());
  });

  test("every echo_* metric echod exports is one the alerts and dashboard know", async () => {
    const res = await fetch(`http://127.0.0.1:${server.ports.metrics}/metrics`);
    assert.equal(res.status, 200);
    const body = await res.text();
    const names = new Set([...body.matchAll(/^(echo_\w+)/gm)].map((m) => m[1]));
    assert.deepEqual([...names].filter((n) => !resolveMetric(n)), []);
  });

  test(`SIGTERM drains and exits within terminationGracePeriodSeconds (${grace}s)`, async () => {
    server.child.kill("SIGTERM");
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve("timeout"), grace * 1000); });
    const result = await Promise.race([server.exited, timeout]);
    clearTimeout(timer);
    assert.notEqual(result, "timeout", `echod still running ${grace}s after SIGTERM`);
    assert.equal(result.code, 0, `exit ${JSON.stringify(result)}\n${server.log}`);
  });
});

describe("echod started with the TLS overlay's configuration", { skip: notBuilt || noOpenssl }, () => {
  const tls = renderOverlay("tls");
  let server;
  let tlsDir;

  before(async () => {
    // A throwaway CA, echod's pair under the Secret's key names (tls.crt,
    // tls.key, ca.crt), and a client pair (client.crt, client.key).
    tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), "echo-tls-"));
    const r = spawnSync("bash", [path.join(repoRoot, "tests/integration/make_test_certs.sh"), tlsDir], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    for (const [from, to] of [["server.crt", "tls.crt"], ["server.key", "tls.key"], ["trainer.crt", "client.crt"], ["trainer.key", "client.key"]]) {
      fs.renameSync(path.join(tlsDir, from), path.join(tlsDir, to));
    }
    server = await startEchod(tls, { tlsDir });
  });
  after(async () => {
    await server?.stop();
    if (tlsDir) fs.rmSync(tlsDir, { recursive: true, force: true });
  });

  for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
    test(`the ${probe} (echoctl over the Unix socket) passes`, () => {
      const cmd = probeCommand(tls, probe, server.env.ECHO_UNIX_SOCKET);
      const r = spawnSync(cmd[0], cmd.slice(1), { env: server.env, encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr + r.stdout + server.log);
    });
  }

  test("the TCP port refuses plaintext gRPC (TLS is on), which is why the probes avoid it", async () => {
    await new Promise((resolve, reject) => {
      const sock = net.connect(server.ports.grpc, "127.0.0.1", () => { sock.destroy(); resolve(); });
      sock.once("error", (err) => reject(new Error(`TCP port not listening: ${err.message}`)));
    });
    const r = spawnSync(echoctlBin, ["--server", `127.0.0.1:${server.ports.grpc}`, "--timeout_seconds", "3", "health"], { encoding: "utf8" });
    assert.notEqual(r.status, 0, `plaintext health check over TCP succeeded: ${r.stdout}`);
  });

  // echoctl over TLS to the TCP port, with or without a client certificate.
  const overTls = (...clientCert) => spawnSync(echoctlBin, [
    "--server", `localhost:${server.ports.grpc}`, "--timeout_seconds", "3",
    "--tls_ca_file", path.join(tlsDir, "ca.crt"), ...clientCert, "node-info",
  ], { encoding: "utf8" });

  test("the TCP port is mutual TLS: a client with a certificate from the CA is served", () => {
    const r = overTls("--tls_cert_file", path.join(tlsDir, "client.crt"), "--tls_key_file", path.join(tlsDir, "client.key"));
    assert.equal(r.status, 0, r.stderr + r.stdout + server.log);
  });

  test("the TCP port refuses TLS clients without a certificate, or with one from another CA", () => {
    assert.notEqual(overTls().status, 0);
    const rogue = overTls("--tls_cert_file", path.join(tlsDir, "rogue.crt"), "--tls_key_file", path.join(tlsDir, "rogue.key"));
    assert.notEqual(rogue.status, 0, rogue.stdout);
  });
});
