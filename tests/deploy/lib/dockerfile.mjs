// Static checks of deploy/docker/Dockerfile (parsed with dockerfile-ast).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { DockerfileParser } from "dockerfile-ast";
import { FLAG_ENV, GRPC_PORT, METRICS_PORT } from "./interface.mjs";
import { deployDir } from "./render.mjs";

export const dockerfilePath = path.join(deployDir, "docker", "Dockerfile");
export const dockerignorePath = path.join(deployDir, "docker", "Dockerfile.dockerignore");

const KEYWORDS = new Set([
  "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
  "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
]);

// Runtime libraries echod needs in the final image (Debian 12 names).
export const RUNTIME_PACKAGES = [
  "libgrpc++1.51", "libprotobuf32", "libabsl20220623", "libprometheus-cpp-core1.0",
  "libprometheus-cpp-pull1.0", "libspdlog1.10", "coinor-libcbc3", "libssl3", "libsqlite3-0",
];
// Build dependencies (the -dev packages of the above and the toolchain).
export const BUILD_PACKAGES = [
  "build-essential", "cmake", "pkg-config", "libgrpc++-dev", "protobuf-compiler-grpc",
  "libprotobuf-dev", "protobuf-compiler", "libabsl-dev", "prometheus-cpp-dev",
  "libspdlog-dev", "nlohmann-json3-dev", "coinor-libcbc-dev", "libcli11-dev",
  "libssl-dev",
];
// Package-name prefixes of CUDA pieces: [runtime stage, build stage].
export const CUDA_PACKAGES = [
  ["cuda-cudart-", "cuda-cudart-dev-"],
  ["libcublas-", "libcublas-dev-"],
  ["libcudnn9-cuda-", "libcudnn9-dev-cuda-"],
];
const TOOLCHAIN = /(^|-)dev($|-)|^build-essential$|^cmake$|^gcc|^g\+\+|^clang|nvcc|^cuda-toolkit|^cuda-libraries-dev|^protobuf-compiler|^pkg-config$|-static-/;

export function parseDockerfile(text) {
  const df = DockerfileParser.parse(text);
  const stages = [];
  for (const ins of df.getInstructions()) {
    const keyword = ins.getKeyword();
    if (keyword === "FROM") {
      const args = (ins.getArgumentsContent() ?? "").split(/\s+/);
      const as = args.findIndex((a) => a.toUpperCase() === "AS");
      stages.push({ image: args[0], name: as >= 0 ? args[as + 1] : String(stages.length), instructions: [] });
    }
    const entry = {
      keyword,
      args: ins.getArgumentsContent() ?? "",
      flags: typeof ins.getFlags === "function" ? ins.getFlags().map((f) => ({ name: f.getName(), value: f.getValue() })) : [],
      line: ins.getRange().start.line + 1,
    };
    if (stages.length > 0) stages.at(-1).instructions.push(entry);
  }
  return { df, stages };
}

// Shell-form command text of RUN/HEALTHCHECK arguments (null for exec form).
function shellForm(args) {
  return args.trimStart().startsWith("[") ? null : args;
}

// Packages named by `apt-get install` commands of a stage (raw words,
// ${...} left in).
export function aptPackages(stage) {
  const pkgs = [];
  for (const ins of stage.instructions.filter((i) => i.keyword === "RUN")) {
    // Options may come before the subcommand (apt-get "${apt_ca[@]}" install).
    for (const m of ins.args.matchAll(/apt-get(?:\s+(?:-\S+|"\$\{[^}]*\}"))*\s+install\s+([^;&|]*)/g)) {
      for (const word of m[1].split(/\s+/)) {
        const w = word.replace(/^"|"$/g, "");
        if (w && !w.startsWith("-")) pkgs.push(w);
      }
    }
  }
  return pkgs;
}

function stageEnv(stage) {
  const names = [];
  for (const ins of stage.instructions.filter((i) => i.keyword === "ENV")) {
    for (const m of ins.args.matchAll(/(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=/g)) names.push(m[1]);
  }
  return names;
}

function shellOf(stage) {
  const shell = stage.instructions.filter((i) => i.keyword === "SHELL").at(-1);
  return shell ? JSON.parse(shell.args) : ["/bin/sh", "-c"];
}

export function checkDockerfile(text) {
  const problems = [];
  // A `# syntax=` directive makes the engine pull a frontend image from a
  // registry first, so the image could not be built where Docker Hub is
  // unreachable (make image).
  const syntax = /^#\s*syntax\s*=.*$/im.exec(text.split(/^[^#\n]/m)[0]);
  if (syntax) problems.push(`"${syntax[0]}": the frontend would be pulled from a registry; use the engine's built-in one`);
  const { stages } = parseDockerfile(text);
  if (stages.length < 2) return [`${stages.length} stage(s): expected a build stage and a runtime stage`];
  const final = stages.at(-1);
  const build = stages.slice(0, -1);
  for (const s of stages) {
    for (const ins of s.instructions) {
      if (!KEYWORDS.has(ins.keyword)) problems.push(`line ${ins.line}: unknown instruction ${ins.keyword}`);
    }
  }
  const names = new Set();
  for (const s of stages) {
    for (const ins of s.instructions.filter((i) => i.keyword === "COPY" || i.keyword === "RUN")) {
      for (const f of ins.flags) {
        const from = f.name === "from" ? f.value : f.name === "mount" ? /from=([\w.-]+)/.exec(f.value ?? "")?.[1] : null;
        if (from && !names.has(from)) problems.push(`line ${ins.line}: --from=${from} is not an earlier stage`);
      }
    }
    names.add(s.name);
  }
  const last = (kw) => final.instructions.filter((i) => i.keyword === kw).at(-1);

  const user = last("USER");
  const uid = user?.args.split(":")[0];
  if (!user) problems.push("runtime stage has no USER: it would run as root");
  else if (!/^\d+$/.test(uid) || Number(uid) === 0) problems.push(`runtime USER ${user.args} is not a numeric non-root uid (Kubernetes runAsNonRoot needs a number)`);

  const hc = last("HEALTHCHECK");
  if (!hc) problems.push("runtime stage has no HEALTHCHECK");
  else {
    if (!/^CMD\s/.test(hc.args)) problems.push("HEALTHCHECK has no CMD");
    if (!/\bechoctl\b[^;]*\bhealth\b/.test(hc.args)) problems.push("HEALTHCHECK does not run `echoctl ... health`");
    for (const flag of ["interval", "timeout", "start-period"]) {
      if (!hc.flags.some((f) => f.name === flag)) problems.push(`HEALTHCHECK has no --${flag}`);
    }
  }

  const entry = last("ENTRYPOINT") ?? last("CMD");
  if (!entry || !/echod"?\s*(\]|$)/.test(entry.args)) problems.push("runtime stage does not start echod");
  const exposed = final.instructions.filter((i) => i.keyword === "EXPOSE").flatMap((i) => i.args.split(/\s+/)).map((p) => Number(p.split("/")[0]));
  for (const port of [GRPC_PORT, METRICS_PORT]) if (!exposed.includes(port)) problems.push(`runtime stage does not EXPOSE ${port}`);

  const runtimePkgs = aptPackages(final);
  for (const p of RUNTIME_PACKAGES) if (!runtimePkgs.includes(p)) problems.push(`runtime stage does not install ${p}`);
  for (const p of runtimePkgs) if (TOOLCHAIN.test(p)) problems.push(`runtime stage installs build package ${p}`);
  const buildPkgs = build.flatMap(aptPackages);
  for (const p of BUILD_PACKAGES) if (!buildPkgs.includes(p)) problems.push(`build stage does not install ${p}`);
  for (const [rt, dev] of CUDA_PACKAGES) {
    if (!runtimePkgs.some((p) => p.startsWith(rt) && !p.startsWith(dev))) problems.push(`runtime stage does not install ${rt}*`);
    if (!buildPkgs.some((p) => p.startsWith(dev))) problems.push(`build stage does not install ${dev}*`);
  }
  const copies = final.instructions.filter((i) => i.keyword === "COPY" && i.flags.some((f) => f.name === "from"));
  if (copies.length === 0) problems.push("runtime stage copies nothing from the build stage");
  if (final.instructions.some((i) => i.keyword === "COPY" && !i.flags.some((f) => f.name === "from"))) {
    problems.push("runtime stage copies from the build context (sources belong in the build stage)");
  }
  const buildRuns = build.flatMap((s) => s.instructions.filter((i) => i.keyword === "RUN").map((i) => i.args)).join("\n");
  if (!/cmake\s+-S\s+\.\s+-B\s+build/.test(buildRuns)) problems.push("build stage does not configure with `cmake -S . -B build`");
  if (!/-DECHO_WITH_CUDA=/.test(buildRuns)) problems.push("build stage does not pass -DECHO_WITH_CUDA");
  if (!/build\/bin\/echod/.test(buildRuns) || !/build\/bin\/echoctl/.test(buildRuns)) problems.push("build stage does not collect build/bin/echod and build/bin/echoctl");
  // echod runs policy OPTIMAL in this child process, found next to echod.
  if (!/build\/bin\/echo_milp_worker/.test(buildRuns)) problems.push("build stage does not collect build/bin/echo_milp_worker (OPTIMAL's child process)");

  for (const s of stages) {
    for (const name of stageEnv(s)) {
      if (name.startsWith("ECHO_") && !FLAG_ENV.has(name)) problems.push(`stage ${s.name}: ENV ${name} is not an echod flag`);
    }
  }
  const env = Object.fromEntries(
    final.instructions.filter((i) => i.keyword === "ENV")
      .flatMap((i) => [...i.args.matchAll(/(?:^|\s)([A-Za-z_]\w*)=(\S+)/g)].map((m) => [m[1], m[2]])));
  if (env.NVIDIA_DRIVER_CAPABILITIES && !/compute/.test(env.NVIDIA_DRIVER_CAPABILITIES)) problems.push("NVIDIA_DRIVER_CAPABILITIES lacks compute");
  return problems;
}

// `bash -n` / `sh -n` on every shell-form RUN and on the HEALTHCHECK command.
export function checkShellSyntax(text) {
  const problems = [];
  const { stages } = parseDockerfile(text);
  for (const s of stages) {
    const shell = shellOf(s);
    for (const ins of s.instructions) {
      let cmd = null;
      if (ins.keyword === "RUN") cmd = shellForm(ins.args);
      if (ins.keyword === "HEALTHCHECK") cmd = shellForm(ins.args.replace(/^CMD\s+/, ""));
      if (cmd === null) continue;
      const interpreter = ins.keyword === "HEALTHCHECK" ? "sh" : path.basename(shell[0]);
      const r = spawnSync(interpreter, ["-n", "-c", cmd], { encoding: "utf8" });
      if (r.status !== 0) problems.push(`line ${ins.line} (${ins.keyword}): ${interpreter} -n: ${r.stderr.trim()}`);
    }
  }
  return problems;
}

// The shell command of the runtime stage's HEALTHCHECK (null when none).
export function healthcheckCommand(text) {
  const { stages } = parseDockerfile(text);
  const hc = stages.at(-1).instructions.filter((i) => i.keyword === "HEALTHCHECK").at(-1);
  return hc ? hc.args.replace(/^CMD\s+/, "") : null;
}

// Runs the HEALTHCHECK command with a stand-in echoctl that prints its
// arguments; returns what it was called with.
export function runHealthcheck(text, env, shell = "sh") {
  const cmd = healthcheckCommand(text);
  if (cmd === null) return { status: -1, args: null };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "echo-hc-"));
  try {
    const stub = path.join(dir, "echoctl");
    fs.writeFileSync(stub, '#!/bin/sh\nprintf "%s\\n" "$@"\n', { mode: 0o755 });
    const r = spawnSync(shell, ["-c", cmd], {
      encoding: "utf8",
      env: { ...env, PATH: `${dir}:/usr/bin:/bin` },
    });
    return { status: r.status, args: r.stdout.trim().split("\n"), stderr: r.stderr };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export function checkDockerignore(text) {
  const problems = [];
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  for (const need of [".git", "build", "**/node_modules"]) {
    if (!lines.includes(need)) problems.push(`Dockerfile.dockerignore does not exclude ${need}`);
  }
  for (const l of lines) {
    if (["src", "proto", "CMakeLists.txt", "*"].includes(l)) problems.push(`Dockerfile.dockerignore excludes ${l}, which the build needs`);
  }
  return problems;
}

// Shared libraries of a built binary that no package of the runtime stage
// provides (needs dpkg/apt-cache and a build of echod; null when unavailable).
// Libraries outside Debian's packages (CUDA, the driver) are not judged here:
// the image build's own ldd step catches those.
export function unprovidedLibraries(binary, runtimePackages) {
  if (!fs.existsSync(binary)) return null;
  const run = (cmd, args) =>
    spawnSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 16 << 20 });
  const ldd = run("ldd", [binary]);
  const closure = run("apt-cache", [
    "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
    "--no-breaks", "--no-replaces", "--no-enhances", ...runtimePackages,
  ]);
  if (ldd.status !== 0 || closure.status !== 0 || !closure.stdout.trim()) return null;
  const provided = new Set(runtimePackages);
  for (const line of closure.stdout.split("\n")) {
    const m = /^(?:\|?(?:Pre)?Depends:\s*)?<?([a-z0-9][a-z0-9+.-]*)(?::\w+)?>?$/.exec(line.trim());
    if (m) provided.add(m[1]);
  }
  // Each library under the names dpkg may know it by (usrmerge, symlinks).
  const libs = [...ldd.stdout.matchAll(/=>\s+(\/\S+)/g)].map((m) => m[1]);
  const candidates = new Map();
  for (const lib of libs) {
    const names = new Set([lib, fs.realpathSync(lib)]);
    for (const n of [...names]) {
      if (n.startsWith("/usr/")) names.add(n.slice(4));
      else names.add(`/usr${n}`);
    }
    candidates.set(lib, [...names]);
  }
  const owners = new Map();
  const dpkg = run("dpkg", ["-S", ...new Set([...candidates.values()].flat())]);
  for (const line of dpkg.stdout.split("\n")) {
    const m = /^([^:,]+)(?::\w+)?(?:, [^:]+)*: (\/.*)$/.exec(line);
    if (m) owners.set(m[2], m[1]);
  }
  const missing = [];
  for (const [lib, names] of candidates) {
    const owner = names.map((n) => owners.get(n)).find(Boolean);
    if (owner && !provided.has(owner)) missing.push(`${lib} (${owner})`);
  }
  return missing;
}
