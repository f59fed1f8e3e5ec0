// Turns the DaemonSet of a rendered manifest (helm template / kubectl
// kustomize output on stdin) into `podman run` argument lists, one per
// container, so the image runs exactly as the chart runs it: the same
// command/args, env, volume mounts (hostPath, ConfigMap, emptyDir, read-only,
// propagation) and security context (user, read-only root, capabilities,
// no privilege escalation). Used by image-test.sh.
//
//   node pod-to-podman.mjs --workdir DIR --image REF [--map HOSTPATH=DIR]...
//
// Prints JSON: {"init": [{name, args}], "containers": [{name, args}]}, where
// args is everything after `podman run`. ConfigMap volumes are written under
// DIR/configmaps/<volume>/ and bind-mounted read-only (a static Pod / podman
// has no API server). --map moves a hostPath the sandbox cannot use as is.
// What differs from a kubelet, by design: the network is always private
// (--network=none; hostNetwork only matters for moving real devices) and
// probes are not run.
import fs from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';

const argv = process.argv.slice(2);
const opt = { map: {} };
for (let i = 0; i < argv.length; i += 2) {
  const [k, v] = [argv[i], argv[i + 1]];
  if (k === '--workdir') opt.workdir = v;
  else if (k === '--image') opt.image = v;
  else if (k === '--node') opt.node = v;
  else if (k === '--map') {
    const eq = v.indexOf('=');
    opt.map[v.slice(0, eq)] = v.slice(eq + 1);
  } else throw new Error(`unknown option ${k}`);
}
if (!opt.workdir || !opt.image) throw new Error('--workdir and --image are required');

const objs = yaml.loadAll(fs.readFileSync(0, 'utf8')).filter((o) => o);
const ds = objs.find((o) => o.kind === 'DaemonSet');
if (!ds) throw new Error('no DaemonSet in the input');
const spec = ds.spec.template.spec;
const configMaps = Object.fromEntries(objs.filter((o) => o.kind === 'ConfigMap').map((o) => [o.metadata.name, o]));

function hostPathOf(p) {
  // Longest mapped prefix wins.
  const keys = Object.keys(opt.map).filter((k) => p === k || p.startsWith(`${k}/`)).sort((a, b) => b.length - a.length);
  return keys.length ? opt.map[keys[0]] + p.slice(keys[0].length) : p;
}

const volumes = {};
for (const v of spec.volumes ?? []) {
  if (v.hostPath) {
    const src = hostPathOf(v.hostPath.path);
    const type = v.hostPath.type ?? '';
    if (type === 'DirectoryOrCreate') fs.mkdirSync(src, { recursive: true, mode: 0o755 });
    else if (type === 'Directory' && !fs.statSync(src).isDirectory()) throw new Error(`${src}: not a directory`);
    volumes[v.name] = { kind: 'bind', src };
  } else if (v.configMap) {
    const cm = configMaps[v.configMap.name];
    if (!cm) throw new Error(`ConfigMap ${v.configMap.name} not rendered`);
    const dir = path.join(opt.workdir, 'configmaps', v.name);
    fs.mkdirSync(dir, { recursive: true });
    for (const [f, text] of Object.entries(cm.data ?? {})) fs.writeFileSync(path.join(dir, f), text);
    volumes[v.name] = { kind: 'bind', src: dir };
  } else if (v.emptyDir) {
    volumes[v.name] = { kind: 'tmpfs', size: v.emptyDir.sizeLimit };
  } else {
    throw new Error(`volume ${v.name}: unsupported type ${Object.keys(v).join(',')}`);
  }
}

function quantityBytes(q) {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(String(q));
  if (!m) throw new Error(`quantity ${q}`);
  return Number(m[1]) * ({ Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 }[m[2]] ?? 1);
}

function runArgs(c, name) {
  const a = ['--rm', '--name', name, '--network=none'];
  const sc = { ...(spec.securityContext ?? {}), ...(c.securityContext ?? {}) };
  if (sc.runAsUser !== undefined) a.push('--user', `${sc.runAsUser}:${sc.runAsGroup ?? 0}`);
  if (sc.readOnlyRootFilesystem) a.push('--read-only', '--read-only-tmpfs=false');
  if (sc.privileged) a.push('--privileged');
  if (sc.allowPrivilegeEscalation === false) a.push('--security-opt=no-new-privileges');
  for (const cap of sc.capabilities?.drop ?? []) a.push(`--cap-drop=${cap}`);
  for (const cap of sc.capabilities?.add ?? []) a.push(`--cap-add=${cap}`);
  if (c.resources?.limits?.memory) a.push(`--memory=${quantityBytes(c.resources.limits.memory)}`);
  for (const e of c.env ?? []) {
    if (e.value !== undefined) a.push('-e', `${e.name}=${e.value}`);
    else if (e.valueFrom?.fieldRef?.fieldPath === 'spec.nodeName') a.push('-e', `${e.name}=${opt.node ?? 'image-test-node'}`);
    else throw new Error(`env ${e.name}: unsupported valueFrom`);
  }
  for (const m of c.volumeMounts ?? []) {
    const v = volumes[m.name];
    if (!v) throw new Error(`mount ${m.name}: no such volume`);
    if (v.kind === 'tmpfs') {
      a.push('--mount', `type=tmpfs,destination=${m.mountPath}${v.size ? `,tmpfs-size=${quantityBytes(v.size)}` : ''}`);
    } else {
      const o = [m.readOnly ? 'ro' : 'rw'];
      if (m.mountPropagation === 'HostToContainer') o.push('rslave');
      else if (m.mountPropagation === 'Bidirectional') o.push('rshared');
      a.push('-v', `${v.src}:${m.mountPath}:${o.join(',')}`);
    }
  }
  if (c.command) a.push(`--entrypoint=${JSON.stringify(c.command)}`);
  a.push(opt.image, ...(c.args ?? []));
  return a;
}

const out = {
  init: (spec.initContainers ?? []).map((c) => ({ name: c.name, args: runArgs(c, `image-test-${c.name}`) })),
  containers: spec.containers.map((c) => ({ name: c.name, args: runArgs(c, `image-test-${c.name}`) })),
  hostNetwork: !!spec.hostNetwork,
};
process.stdout.write(`${JSON.stringify(out)}\n`);
