// Rendering the kustomizations under deploy/k8s with `kubectl kustomize`.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, "../../..");
export const deployDir = path.join(repoRoot, "deploy");
export const k8sDir = path.join(deployDir, "k8s");

export function parseYamlStream(text, origin) {
  const objects = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) {
      throw new Error(`${origin}: ${doc.errors.map((e) => e.message).join("; ")}`);
    }
    const value = doc.toJS();
    if (value !== null && value !== undefined) objects.push(value);
  }
  return objects;
}

export function kustomize(dir) {
  let out;
  try {
    out = execFileSync("kubectl", ["kustomize", dir], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      maxBuffer: 64 * 1024 * 1024,
    });
  } catch (err) {
    throw new Error(`kubectl kustomize ${path.relative(repoRoot, dir)} failed:\n${err.stderr || err.message}`);
  }
  return parseYamlStream(out, `kubectl kustomize ${dir}`);
}

// Directories with a kustomization file directly under deploy/k8s/<kind>.
export function kustomizations(kind) {
  const root = path.join(k8sDir, kind);
  if (!fs.existsSync(root)) return [];
  return fs
    .readdirSync(root, { withFileTypes: true })
    .filter((e) => e.isDirectory() && fs.existsSync(path.join(root, e.name, "kustomization.yaml")))
    .map((e) => e.name)
    .sort();
}

export function renderOverlay(name) {
  return kustomize(path.join(k8sDir, "overlays", name));
}

// The base plus the given components, rendered through a throwaway overlay:
// shows that the components compose (e.g. TLS and monitoring together).
export function renderWithComponents(components, namespace = "echo") {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "echo-kustomize-"));
  try {
    const rel = (p) => path.relative(dir, path.join(k8sDir, p));
    const lines = [
      "apiVersion: kustomize.config.k8s.io/v1beta1",
      "kind: Kustomization",
      `namespace: ${namespace}`,
      "resources:",
      `  - ${rel("base")}`,
      "components:",
      ...components.map((c) => `  - ${rel(path.join("components", c))}`),
      "",
    ];
    fs.writeFileSync(path.join(dir, "kustomization.yaml"), lines.join("\n"));
    return kustomize(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export const find = (objects, kind, name) =>
  objects.find((o) => o.kind === kind && (name === undefined || o.metadata?.name === name));
export const findAll = (objects, kind) => objects.filter((o) => o.kind === kind);
