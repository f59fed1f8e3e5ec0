// kustomize-lite: builds a kustomization without kubectl/kustomize (neither is
// packaged for Debian 12). It supports exactly what deploy/kustomize uses:
// resources (files and directories), components, namespace, images, and
// patches whose file is a JSON 6902 operation list. Anything else is an error.
// Where kubectl is installed, check-manifests.mjs compares the two builds.

import fs from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';

const SUPPORTED = new Set(['apiVersion', 'kind', 'resources', 'components', 'namespace', 'images', 'patches']);

// Kinds that are not namespaced (of those this project could use).
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'PriorityClass',
  'CustomResourceDefinition', 'RuntimeClass', 'StorageClass', 'PersistentVolume']);

function loadKustomization(dir) {
  const file = ['kustomization.yaml', 'kustomization.yml', 'Kustomization'].map((f) => path.join(dir, f)).find((f) => fs.existsSync(f));
  if (!file) throw new Error(`${dir}: no kustomization.yaml`);
  const k = yaml.load(fs.readFileSync(file, 'utf8'));
  for (const key of Object.keys(k)) {
    if (!SUPPORTED.has(key)) throw new Error(`${file}: field '${key}' is not supported by kustomize-lite`);
  }
  return k;
}

function loadObjects(file) {
  return yaml.loadAll(fs.readFileSync(file, 'utf8')).filter((o) => o);
}

function decodePointer(p) {
  if (!p.startsWith('/')) throw new Error(`bad JSON pointer ${p}`);
  return p.slice(1).split('/').map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

export function applyJsonPatch(obj, ops) {
  for (const op of ops) {
    const parts = decodePointer(op.path);
    const last = parts.pop();
    let parent = obj;
    for (const p of parts) {
      parent = Array.isArray(parent) ? parent[Number(p)] : parent?.[p];
      if (parent === undefined) throw new Error(`patch ${op.op} ${op.path}: missing parent`);
    }
    const value = structuredClone(op.value);
    switch (op.op) {
      case 'add':
        if (Array.isArray(parent)) {
          if (last === '-') parent.push(value);
          else parent.splice(Number(last), 0, value);
        } else parent[last] = value;
        break;
      case 'replace':
        if (!(last in parent)) throw new Error(`patch replace ${op.path}: no such member`);
        parent[last] = value;
        break;
      case 'remove':
        if (!(last in parent)) throw new Error(`patch remove ${op.path}: no such member`);
        if (Array.isArray(parent)) parent.splice(Number(last), 1);
        else delete parent[last];
        break;
      case 'test':
        if (JSON.stringify(parent[last]) !== JSON.stringify(value)) throw new Error(`patch test ${op.path} failed`);
        break;
      default:
        throw new Error(`patch op ${op.op} not supported`);
    }
  }
}

function matchesTarget(o, t) {
  const [group, version] = o.apiVersion.includes('/') ? o.apiVersion.split('/') : ['', o.apiVersion];
  return (t.group === undefined || t.group === group)
    && (t.version === undefined || t.version === version)
    && (t.kind === undefined || t.kind === o.kind)
    && (t.name === undefined || t.name === o.metadata?.name)
    && (t.namespace === undefined || t.namespace === o.metadata?.namespace);
}

function applyPatches(dir, k, objs) {
  for (const p of k.patches ?? []) {
    if (!p.path || !p.target) throw new Error(`${dir}: only 'path' + 'target' patches are supported`);
    const ops = yaml.load(fs.readFileSync(path.join(dir, p.path), 'utf8'));
    if (!Array.isArray(ops)) throw new Error(`${dir}/${p.path}: only JSON 6902 patches are supported`);
    const hits = objs.filter((o) => matchesTarget(o, p.target));
    if (!hits.length) throw new Error(`${dir}/${p.path}: target matches nothing`);
    for (const o of hits) applyJsonPatch(o, ops);
  }
}

function imageRefs(node, visit) {
  if (Array.isArray(node)) node.forEach((n) => imageRefs(n, visit));
  else if (node && typeof node === 'object') {
    for (const key of ['containers', 'initContainers']) {
      if (Array.isArray(node[key])) node[key].forEach((c) => { if (typeof c.image === 'string') visit(c); });
    }
    Object.values(node).forEach((n) => imageRefs(n, visit));
  }
}

function applyTransformers(k, objs) {
  if (k.namespace) {
    for (const o of objs) if (!CLUSTER_SCOPED.has(o.kind)) (o.metadata ??= {}).namespace = k.namespace;
  }
  for (const img of k.images ?? []) {
    imageRefs(objs, (c) => {
      const m = /^([^@:]+(?::\d+\/[^@:]+)?)(?::([^@]+))?(@.+)?$/.exec(c.image);
      if (!m || m[1] !== img.name) return;
      const name = img.newName ?? m[1];
      const tag = img.digest ? `@${img.digest}` : img.newTag ? `:${img.newTag}` : (m[2] ? `:${m[2]}` : '') + (m[3] ?? '');
      c.image = name + tag;
    });
  }
}

function accumulate(dir, k) {
  const objs = [];
  for (const r of k.resources ?? []) {
    const p = path.join(dir, r);
    if (fs.statSync(p).isDirectory()) objs.push(...build(p));
    else objs.push(...loadObjects(p));
  }
  return objs;
}

// Returns the list of objects `kustomize build dir` would emit (order may
// differ; compare as a set keyed by kind/namespace/name).
export function build(dir) {
  const k = loadKustomization(dir);
  const objs = accumulate(dir, k);
  for (const c of k.components ?? []) {
    const cdir = path.join(dir, c);
    const ck = loadKustomization(cdir);
    if (ck.kind !== 'Component') throw new Error(`${cdir}: not a Component`);
    objs.push(...accumulate(cdir, ck));
    applyPatches(cdir, ck, objs);
    applyTransformers(ck, objs);
  }
  applyPatches(dir, k, objs);
  applyTransformers(k, objs);
  return objs;
}

export function objectKey(o) {
  return `${o.kind}/${o.metadata?.namespace ?? ''}/${o.metadata?.name}`;
}
