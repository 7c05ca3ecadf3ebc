// Static checks of the image definition, plus its HEALTHCHECK command run
// against a stand-in echoctl.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import {
  RUNTIME_PACKAGES, checkDockerfile, checkDockerignore, checkShellSyntax, dockerfilePath,
  dockerignorePath, runHealthcheck, unprovidedLibraries,
} from "../lib/dockerfile.mjs";
import { repoRoot } from "../lib/render.mjs";

const text = fs.readFileSync(dockerfilePath, "utf8");

test("Dockerfile: multi-stage, non-root numeric USER, HEALTHCHECK with echoctl, runtime libs only", () => {
  assert.deepEqual(checkDockerfile(text), []);
});

test("Dockerfile: RUN and HEALTHCHECK commands are valid shell", () => {
  assert.deepEqual(checkShellSyntax(text), []);
});

for (const shell of ["sh", "bash"]) {
  test(`HEALTHCHECK (${shell}) asks echoctl for health on the right address`, () => {
    const cases = [
      [{}, "127.0.0.1:50051"],
      [{ ECHO_GRPC_ADDRESS: "0.0.0.0:50051" }, "127.0.0.1:50051"],
      [{ ECHO_GRPC_ADDRESS: "[::]:6000" }, "127.0.0.1:6000"],
      [{ ECHO_UNIX_SOCKET: "/run/echo/echod.sock", ECHO_GRPC_ADDRESS: "0.0.0.0:50051" }, "unix:///run/echo/echod.sock"],
    ];
    for (const [env, server] of cases) {
      const r = runHealthcheck(text, env, shell);
      assert.equal(r.status, 0, r.stderr);
      assert.deepEqual(r.args, ["--server", server, "health"], JSON.stringify(env));
    }
  });
}

test("Dockerfile.dockerignore keeps VCS data and build trees out of the context", () => {
  assert.ok(fs.existsSync(dockerignorePath), "deploy/docker/Dockerfile.dockerignore is missing");
  assert.deepEqual(checkDockerignore(fs.readFileSync(dockerignorePath, "utf8")), []);
});

// Runs once echod has been built here: every Debian shared library it links
// must come from a package the runtime stage installs (or their dependencies).
const binDir = process.env.ECHO_BIN_DIR ?? path.join(repoRoot, "build", "bin");
for (const name of ["echod", "echoctl"]) {
  const binary = path.join(binDir, name);
  const missing = unprovidedLibraries(binary, RUNTIME_PACKAGES);
  test(`runtime stage provides the shared libraries of ${name}`, { skip: missing === null && `no ${binary} (or no dpkg/apt-cache)` }, () => {
    assert.deepEqual(missing, []);
  });
}
