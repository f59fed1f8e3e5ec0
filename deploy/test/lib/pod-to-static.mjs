// The rendered DaemonSet's Pod template as a static Pod for a standalone
// kubelet (deploy/test/realkubelet-chart.sh). Everything stays as rendered
// (containers, args, securityContext, mounts, hostNetwork, priority class)
// except what a static Pod cannot have:
//   - ConfigMap volumes become hostPath volumes of a folder holding the same
//     files (written to --config-dir/<volume>/), a static Pod cannot mount a
//     ConfigMap;
//   - serviceAccountName is dropped (no API server, no ServiceAccount; the
//     chart already sets automountServiceAccountToken: false);
//   - with --host-network true, hostNetwork (for a harness whose every Pod
//     network runs fabric-cni, which needs the agent: the chart's cni.enabled
//     does the same).
//
//   node pod-to-static.mjs --name NAME --config-dir DIR [--host-network true] < rendered.yaml > pod.yaml
import fs from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';

const argv = process.argv.slice(2);
const opt = {};
for (let i = 0; i < argv.length; i += 2) opt[argv[i].replace(/^--/, '')] = argv[i + 1];
if (!opt.name || !opt['config-dir']) throw new Error('--name and --config-dir are required');

const objs = yaml.loadAll(fs.readFileSync(0, 'utf8')).filter((o) => o);
const ds = objs.find((o) => o.kind === 'DaemonSet');
if (!ds) throw new Error('no DaemonSet in the input');
const configMaps = Object.fromEntries(objs.filter((o) => o.kind === 'ConfigMap').map((o) => [o.metadata.name, o]));
const tpl = structuredClone(ds.spec.template);
const spec = tpl.spec;
delete spec.serviceAccountName;
delete spec.serviceAccount;
if (opt['host-network'] === 'true') {
  spec.hostNetwork = true;
  spec.dnsPolicy = 'ClusterFirstWithHostNet';
}
spec.volumes = (spec.volumes ?? []).map((v) => {
  if (!v.configMap) return v;
  const cm = configMaps[v.configMap.name];
  if (!cm) throw new Error(`ConfigMap ${v.configMap.name} not rendered`);
  const dir = path.resolve(opt['config-dir'], v.name);
  fs.mkdirSync(dir, { recursive: true });
  for (const [f, text] of Object.entries(cm.data ?? {})) fs.writeFileSync(path.join(dir, f), text);
  return { name: v.name, hostPath: { path: dir, type: 'Directory' } };
});
const pod = {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: opt.name, namespace: ds.metadata.namespace, labels: tpl.metadata?.labels ?? {}, annotations: tpl.metadata?.annotations ?? {} },
  spec,
};
process.stdout.write(yaml.dump(pod, { lineWidth: -1 }));
