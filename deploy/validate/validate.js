#!/usr/bin/env node
// Offline checks of rendered Kubernetes manifests (see check.sh, which runs
// them after `kubectl kustomize`):
//
//   node validate.js schema FILE...      every object against the Kubernetes
//                                        API types (kubernetes-types, checked
//                                        by the TypeScript compiler: unknown
//                                        fields, wrong types, missing required
//                                        fields, wrong apiVersion/kind) plus
//                                        formats the types cannot express
//   node validate.js policy FILE...      Strata's deployment rules
//   node validate.js dockerfile FILE     the image's Dockerfile rules
//
// Prints one line per finding, "LAYER: FILE: Kind/name: where: what", and
// exits 1 when there is any (0 when clean, 2 on usage or unreadable input).
'use strict';

const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

// ---------------------------------------------------------------------------
// Input.

// Every document of every file: {file, index, obj}. YAML errors (including
// duplicate keys) are findings of the layer that reads the file.
function loadObjects(files, layer, findings) {
  const out = [];
  for (const file of files) {
    let text;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (e) {
      console.error(`${layer}: cannot read ${file}: ${e.message}`);
      process.exit(2);
    }
    const docs = YAML.parseAllDocuments(text, { uniqueKeys: true });
    docs.forEach((doc, index) => {
      for (const err of doc.errors) {
        findings.push(`${layer}: ${file}: document ${index + 1}: YAML: ${err.message.split('\n')[0]}`);
      }
      if (doc.errors.length) return;
      const obj = doc.toJS({ maxAliasCount: 0 });
      if (obj === null || obj === undefined) return;
      if (typeof obj !== 'object' || Array.isArray(obj)) {
        findings.push(`${layer}: ${file}: document ${index + 1}: not an object`);
        return;
      }
      out.push({ file, index, obj });
    });
  }
  return out;
}

function idOf(obj) {
  const name = obj.metadata && obj.metadata.name;
  return `${obj.kind || '<no kind>'}/${name || '<no name>'}`;
}

// JSON-path-like text: spec.template.spec.containers[0].ports[1].
function childPath(parent, key) {
  if (typeof key === 'number') return `${parent}[${key}]`;
  const plain = /^[A-Za-z_][A-Za-z0-9_]*$/.test(key);
  if (!parent) return plain ? key : `[${JSON.stringify(key)}]`;
  return plain ? `${parent}.${key}` : `${parent}[${JSON.stringify(key)}]`;
}

// ---------------------------------------------------------------------------
// Schema layer.

// apiVersion -> the module declaring its kinds.
const API_MODULES = {
  'v1': 'kubernetes-types/core/v1',
  'apps/v1': 'kubernetes-types/apps/v1',
  'batch/v1': 'kubernetes-types/batch/v1',
  'policy/v1': 'kubernetes-types/policy/v1',
  'networking.k8s.io/v1': 'kubernetes-types/networking/v1',
  'rbac.authorization.k8s.io/v1': 'kubernetes-types/rbac/v1',
  'autoscaling/v2': 'kubernetes-types/autoscaling/v2',
  'scheduling.k8s.io/v1': 'kubernetes-types/scheduling/v1',
  'kubeflow.org/v1': './types/kubeflow-v1',
};

const QUANTITY = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const LABEL_NAME = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$/;
const LABEL_VALUE = /^(([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?)$/;
// Kinds whose names become DNS labels (Services) or label values.
const LABEL_NAMED_KINDS = new Set(['Service', 'Namespace', 'StatefulSet']);

// Writes `value` as pretty JSON into `lines`, recording the JSON path of
// every line in `paths`, so a compiler diagnostic maps back to a field.
// `skip` maps paths already reported to 'delete' (an unknown field: left
// out) or 'any' (a wrong value: written as `any`), so that the next pass
// finds the errors the compiler stopped short of.
function writeJson(value, p, indent, prefix, suffix, lines, paths, skip) {
  const pad = '  '.repeat(indent);
  if (skip.get(p) === 'any') {
    lines.push(`${pad}${prefix}(null as any)${suffix}`);
    paths.push(p);
    return;
  }
  if (Array.isArray(value) || (value && typeof value === 'object')) {
    const isArray = Array.isArray(value);
    const keys = isArray ? value.map((_, i) => i)
                         : Object.keys(value).filter((k) => skip.get(childPath(p, k)) !== 'delete');
    const [open, close] = isArray ? ['[', ']'] : ['{', '}'];
    if (keys.length === 0) {
      lines.push(`${pad}${prefix}${open}${close}${suffix}`);
      paths.push(p);
      return;
    }
    lines.push(`${pad}${prefix}${open}`);
    paths.push(p);
    keys.forEach((k, i) => {
      const comma = i < keys.length - 1 ? ',' : '';
      const keyText = isArray ? '' : `${JSON.stringify(k)}: `;
      writeJson(value[k], childPath(p, k), indent + 1, keyText, comma, lines, paths, skip);
    });
    lines.push(`${pad}${close}${suffix}`);
    paths.push(p);
    return;
  }
  lines.push(`${pad}${prefix}${JSON.stringify(value)}${suffix}`);
  paths.push(p);
}

// Formats the API types leave as plain strings and numbers.
function checkFormats(item, findings) {
  const { file, obj } = item;
  const where = `schema: ${file}: ${idOf(obj)}`;
  const meta = obj.metadata || {};
  if (typeof meta.name === 'string') {
    const re = LABEL_NAMED_KINDS.has(obj.kind) ? DNS1035_LABEL : DNS1123_SUBDOMAIN;
    const max = LABEL_NAMED_KINDS.has(obj.kind) ? 63 : 253;
    if (!re.test(meta.name) || meta.name.length > max) {
      findings.push(`${where}: metadata.name: "${meta.name}" is not a valid ${obj.kind} name`);
    }
  }
  const walk = (v, p) => {
    if (Array.isArray(v)) {
      v.forEach((x, i) => walk(x, childPath(p, i)));
      return;
    }
    if (v && typeof v === 'object') {
      const isLabels = /(^|\.)(labels|matchLabels|selector|nodeSelector)$/.test(p) &&
          Object.values(v).every((x) => typeof x === 'string');
      for (const [k, x] of Object.entries(v)) {
        const cp = childPath(p, k);
        if (isLabels) {
          const slash = k.lastIndexOf('/');
          const name = slash >= 0 ? k.slice(slash + 1) : k;
          const prefix = slash >= 0 ? k.slice(0, slash) : '';
          if (!LABEL_NAME.test(name) || name.length > 63 ||
              (prefix && (!DNS1123_SUBDOMAIN.test(prefix) || prefix.length > 253))) {
            findings.push(`${where}: ${cp}: "${k}" is not a valid label key`);
          }
          if (!LABEL_VALUE.test(x) || x.length > 63) {
            findings.push(`${where}: ${cp}: "${x}" is not a valid label value`);
          }
        }
        walk(x, cp);
      }
      return;
    }
    if (typeof v === 'number' && !Number.isInteger(v)) {
      findings.push(`${where}: ${p}: ${v} is not an integer (Kubernetes API numbers are integers)`);
    }
    if (typeof v === 'number' && /(containerPort|hostPort|\.port|targetPort|nodePort)$/.test(p) &&
        (v < 1 || v > 65535)) {
      findings.push(`${where}: ${p}: port ${v} is outside 1-65535`);
    }
    if (/(resources\.(requests|limits)|minResources|\.capacity)(\.[^.[]+|\[[^\]]+\])$/.test(p) ||
        /\.sizeLimit$/.test(p)) {
      if (typeof v === 'string' && !QUANTITY.test(v)) {
        findings.push(`${where}: ${p}: "${v}" is not a Kubernetes quantity`);
      }
    }
  };
  walk(obj, '');
}

function schemaLayer(files) {
  const findings = [];
  const items = loadObjects(files, 'schema', findings);
  let ts;
  try {
    ts = require('typescript');
  } catch (e) {
    console.error('schema: the typescript package is missing; run check.sh (it runs npm ci)');
    process.exit(2);
  }
  const checked = [];
  const aliases = {};
  const header = [];
  items.forEach((item, n) => {
    const { obj } = item;
    const where = `schema: ${item.file}: ${idOf(obj)}`;
    if (typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string') {
      findings.push(`${where}: apiVersion and kind must be strings`);
      return;
    }
    const mod = API_MODULES[obj.apiVersion];
    if (!mod) {
      findings.push(`${where}: apiVersion "${obj.apiVersion}" has no schema here (known: ${Object.keys(API_MODULES).join(', ')})`);
      return;
    }
    if (!/^[A-Z][A-Za-z0-9]*$/.test(obj.kind)) {
      findings.push(`${where}: kind "${obj.kind}" is not a kind name`);
      return;
    }
    if (!(mod in aliases)) {
      aliases[mod] = `api${Object.keys(aliases).length}`;
      header.push(`import type * as ${aliases[mod]} from ${JSON.stringify(mod)};`);
    }
    item.type = `${aliases[mod]}.${obj.kind}`;
    item.skip = new Map();
    item.n = n;
    checked.push(item);
    checkFormats(item, findings);
  });

  const fileName = path.join(__dirname, '__manifests__.ts');
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    target: ts.ScriptTarget.ES2020,
    module: ts.ModuleKind.CommonJS,
    moduleResolution: ts.ModuleResolutionKind.Node10 || ts.ModuleResolutionKind.NodeJs,
  };
  const host = ts.createCompilerHost(options);
  let source = '';
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    name === fileName ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === fileName || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => (name === fileName ? source : readFile(name));

  // The compiler reports some errors of an object literal and stops; each
  // pass leaves out what the previous ones reported, until nothing new.
  let program;
  let pending = checked;
  for (let pass = 0; pass < 10 && pending.length; pass++) {
    const lines = [];
    const paths = [];
    const lineItem = [];
    for (const item of pending) {
      item.declLine = lines.length;
      lines.push(`export const object${item.n}: ${item.type} =`);
      paths.push('');
      lineItem.push(item);
      const first = lines.length;
      writeJson(item.obj, '', 0, '', ';', lines, paths, item.skip);
      for (let i = first; i < lines.length; i++) lineItem.push(item);
    }
    source = header.concat(lines).join('\n') + '\n';
    program = ts.createProgram([fileName], options, host, program);
    const next = new Set();
    for (const d of ts.getPreEmitDiagnostics(program)) {
      const text = ts.flattenDiagnosticMessageText(d.messageText, '\n').split('\n')
          .map((s) => s.trim()).filter(Boolean);
      // The last line of a chain is the most specific; keep the first for
      // context when they differ.
      const message = text.length > 1 ? `${text[text.length - 1]} (${text[0]})` : text[0];
      if (!d.file || d.file.fileName !== fileName) {
        findings.push(`schema: internal: ${d.file ? d.file.fileName : ''}: ${message}`);
        continue;
      }
      const line = d.file.getLineAndCharacterOfPosition(d.start).line - header.length;
      if (line < 0) {
        findings.push(`schema: ${message}`);
        continue;
      }
      const item = lineItem[line];
      const where = `schema: ${item.file}: ${idOf(item.obj)}`;
      if (line === item.declLine) {
        findings.push(`${where}: kind "${item.obj.kind}" does not exist in ${item.obj.apiVersion} (${message})`);
        continue;
      }
      const p = paths[line];
      findings.push(`${where}: ${p || '(object)'}: ${message}`);
      if (!p || item.skip.has(p)) continue;
      // 2353/2561: an unknown property (left out next time); else a wrong
      // value (written as `any` next time).
      item.skip.set(p, d.code === 2353 || d.code === 2561 ? 'delete' : 'any');
      next.add(item);
    }
    pending = [...next];
  }
  return findings;
}

// ---------------------------------------------------------------------------
// Policy layer.

const LONG_RUNNING_KINDS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet']);
const STRATA_DAEMONS = new Set(['strata-coordinator', 'strata-ps', 'strata-worker']);
const ROLE_LABEL = 'app.kubernetes.io/component';
const REQUIRED_LABELS = ['app.kubernetes.io/name', 'app.kubernetes.io/instance',
  'app.kubernetes.io/part-of'];

// Every pod template in the render: {item, where, template, role, replicas,
// longRunning, tfReplica}.
function podTemplates(items) {
  const out = [];
  for (const item of items) {
    const { obj } = item;
    const spec = obj.spec || {};
    const base = { item, where: idOf(obj), ns: (obj.metadata || {}).namespace || '' };
    if (['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job'].includes(obj.kind)) {
      if (spec.template) {
        out.push({ ...base, template: spec.template,
          replicas: obj.kind === 'Job' ? null : (spec.replicas === undefined ? 1 : spec.replicas),
          longRunning: LONG_RUNNING_KINDS.has(obj.kind) });
      }
    } else if (obj.kind === 'CronJob') {
      const t = spec.jobTemplate && spec.jobTemplate.spec && spec.jobTemplate.spec.template;
      if (t) out.push({ ...base, template: t, replicas: null, longRunning: false });
    } else if (obj.kind === 'Pod') {
      out.push({ ...base, template: { metadata: obj.metadata, spec }, replicas: 1, longRunning: true });
    } else if (obj.kind === 'TFJob') {
      for (const [rt, rs] of Object.entries(spec.tfReplicaSpecs || {})) {
        if (!rs || !rs.template) continue;
        // The chief's main container ends the job when it exits; PS and
        // workers serve until the operator cleans them up.
        out.push({ ...base, where: `${idOf(obj)} replica ${rt}`, template: rs.template,
          replicas: rs.replicas === undefined ? 1 : rs.replicas,
          longRunning: rt === 'PS' || rt === 'Worker', tfReplica: rt });
      }
    }
  }
  for (const p of out) {
    p.labels = (p.template.metadata && p.template.metadata.labels) || {};
    p.role = p.labels[ROLE_LABEL];
    p.instances = podInstances(p);
  }
  return out;
}

// The labels a StatefulSet controller adds to each of its pods: its name
// and its ordinal.
const POD_NAME_LABEL = 'statefulset.kubernetes.io/pod-name';
const POD_INDEX_LABEL = 'apps.kubernetes.io/pod-index';

// The pods a template makes, as far as selectors can tell them apart:
// [{name, ordinal, labels}], one per ordinal of a StatefulSet (its
// template's labels plus the controller's), else one with the template's
// labels (name and ordinal undefined).
function podInstances(p) {
  const { obj } = p.item;
  if (obj.kind !== 'StatefulSet' || !obj.metadata || !obj.metadata.name) {
    return [{ name: undefined, ordinal: undefined, labels: p.labels }];
  }
  return Array.from({ length: Number.isInteger(p.replicas) ? p.replicas : 0 }, (_, i) => ({
    name: `${obj.metadata.name}-${i}`,
    ordinal: i,
    labels: { ...p.labels, [POD_NAME_LABEL]: `${obj.metadata.name}-${i}`, [POD_INDEX_LABEL]: String(i) },
  }));
}

function selectorMatches(selector, labels) {
  if (!selector) return false;
  const ml = selector.matchLabels || {};
  if (Object.keys(ml).length === 0 && !(selector.matchExpressions || []).length) return false;
  for (const [k, v] of Object.entries(ml)) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions || []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    if (e.operator === 'In' && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === 'NotIn' && has && e.values.includes(labels[e.key])) return false;
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
  }
  return true;
}

// Whether a NetworkPolicy's podSelector selects a pod (empty: every pod).
function selectsPod(sel, labels) {
  return !sel || (Object.keys(sel.matchLabels || {}).length === 0 && !(sel.matchExpressions || []).length) ||
      selectorMatches(sel, labels);
}

// Whether the NetworkPolicy specs `policies` of namespace `ns` let the pods
// of template `from` open TCP connections to those of template `to` on
// `port`: a direction no policy restricts is open; else one of the
// policies that select the pod has a rule for the peer and the port.
function flowAllowed(policies, ns, from, to, port) {
  const typesOf = (s) => s.policyTypes || ['Ingress'].concat(s.egress ? ['Egress'] : []);
  const namedPort = (name) => ((to.template.spec || {}).containers || [])
      .flatMap((c) => c.ports || []).filter((x) => x.name === name).map((x) => x.containerPort)[0];
  const portOk = (rulePorts) => !rulePorts || !rulePorts.length || rulePorts.some((x) =>
      (x.protocol || 'TCP') === 'TCP' && (x.port === undefined || x.port === port ||
          (typeof x.port === 'number' && x.endPort !== undefined && port >= x.port && port <= x.endPort) ||
          (typeof x.port === 'string' && namedPort(x.port) === port)));
  const peerOk = (peers, labels) => !peers || !peers.length || peers.some((peer) => {
    if (peer.ipBlock) return false;
    const nsSel = peer.namespaceSelector;
    if (nsSel && !selectsPod(nsSel, { 'kubernetes.io/metadata.name': ns })) return false;
    return selectsPod(peer.podSelector, labels);
  });
  const open = (pod, type, rules, peers, other) => {
    const applying = policies.filter((s) => selectsPod(s.podSelector, pod.labels) && typesOf(s).includes(type));
    return !applying.length || applying.some((s) => (s[rules] || []).some((r) =>
        peerOk(r[peers], other.labels) && portOk(r.ports)));
  };
  return open(from, 'Egress', 'egress', 'to', to) && open(to, 'Ingress', 'ingress', 'from', from);
}

// "HOST:PORT" (or a URL "scheme://HOST:PORT") with HOST shortened to
// "POD.SERVICE" where it is a pod's name through a headless Service in
// namespace `ns` (POD.SERVICE, POD.SERVICE.NS.svc or
// POD.SERVICE.$(POD_NAMESPACE).svc, optionally .cluster.local).
function podAddress(address, ns) {
  const text = String(address).trim().replace(/^[a-z][a-z0-9+.-]*:\/\//, '').replace(/\/$/, '');
  const colon = text.lastIndexOf(':');
  const host = colon >= 0 ? text.slice(0, colon) : text;
  const port = colon >= 0 ? text.slice(colon + 1) : '';
  const m = host.match(/^([^.]+)\.([^.]+)(?:\.([^.]+)\.svc(?:\.cluster\.local)?)?$/);
  const short = m && (m[3] === undefined || m[3] === '$(POD_NAMESPACE)' || m[3] === ns) ? `${m[1]}.${m[2]}` : host;
  return `${short}:${port}`;
}

// The port of the first URL of a --listen-*-urls flag.
function urlPort(urls) {
  const m = String(urls || '').split(',')[0].match(/:(\d+)\/?$/);
  return m ? Number(m[1]) : undefined;
}

function sameMembers(a, b) {
  const x = [...a].sort();
  const y = [...b].sort();
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

function probePort(probe) {
  if (probe.grpc) return { kind: 'grpc', port: probe.grpc.port };
  if (probe.httpGet) return { kind: 'httpGet', port: probe.httpGet.port };
  if (probe.tcpSocket) return { kind: 'tcpSocket', port: probe.tcpSocket.port };
  return null;
}

function flagValue(args, name) {
  for (const a of args || []) {
    if (typeof a !== 'string') continue;
    const m = a.match(new RegExp(`^--${name.replace(/[-_]/g, '[-_]')}=(.*)$`));
    if (m) return m[1];
  }
  return undefined;
}

// A coordinator elected through etcd: one of several replicas, leader or
// standby (strata-coordinator --etcd-endpoints).
function isElectedCoordinator(c) {
  return (c.command || [])[0] === 'strata-coordinator' && flagValue(c.args, 'etcd-endpoints') !== undefined;
}

// One replica of a replicated PS task (strata-ps --replica, the job's
// strategy.ps_replication 2): with --host, it listens there with the ports
// of its own entries of --replica-addresses (serving, only while primary)
// and --replication-addresses (at once).
function isPsReplica(c) {
  return (c.command || [])[0] === 'strata-ps' && flagValue(c.args, 'replica') !== undefined;
}

// The env entry `name` of container c takes the pod label `label`.
function envFromLabel(c, name, label) {
  const e = (c.env || []).find((x) => x.name === name);
  const f = e && e.valueFrom && e.valueFrom.fieldRef && e.valueFrom.fieldRef.fieldPath;
  return f === `metadata.labels['${label}']` || f === `metadata.labels["${label}"]`;
}

// The env entry `name` of container c takes the pod's field `field`.
function envFromField(c, name, field) {
  const e = (c.env || []).find((x) => x.name === name);
  return Boolean(e && e.valueFrom && e.valueFrom.fieldRef && e.valueFrom.fieldRef.fieldPath === field);
}

// `text` with each $(VAR) of container c replaced where the render fixes
// its value: a literal env value, or a label of the pod template
// (`labels`); with `instance` ({name, ordinal}: one pod of a StatefulSet)
// also the pod's name and the labels its controller adds. Other references
// stay as written.
function resolveVars(text, c, labels, instance) {
  return String(text).replace(/(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (ref, name) => {
    const e = (c.env || []).find((x) => x.name === name);
    if (!e) return ref;
    if (e.value !== undefined) return String(e.value);
    const f = e.valueFrom && e.valueFrom.fieldRef && e.valueFrom.fieldRef.fieldPath;
    if (instance && f === 'metadata.name') return instance.name;
    const m = f && f.match(/^metadata\.labels\[['"]([^'"]+)['"]\]$/);
    if (!m) return ref;
    if (instance && m[1] === POD_NAME_LABEL) return instance.name;
    if (instance && m[1] === POD_INDEX_LABEL) return String(instance.ordinal);
    return labels[m[1]] !== undefined ? labels[m[1]] : ref;
  });
}

// A replica address as one pod of container c sees it, resolved: "NAME",
// "NAME.NS", "NAME.NS.svc" or "NAME.NS.svc.DOMAIN", then ":PORT", NS the
// namespace `ns` or $(V) with V from the pod's metadata.namespace: {name,
// port} of a Service of the namespace, or null.
function serviceEntry(entry, c, ns) {
  const colon = entry.lastIndexOf(':');
  if (colon < 0) return null;
  const port = Number(entry.slice(colon + 1));
  const parts = entry.slice(0, colon).split('.');
  if (!Number.isInteger(port) || !DNS1035_LABEL.test(parts[0]) || parts.some((x) => !x)) return null;
  if (parts.length > 1) {
    const v = parts[1].match(/^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$/);
    if (!(parts[1] === ns || (v && envFromField(c, v[1], 'metadata.namespace')))) return null;
  }
  if (parts.length > 2 && parts[2] !== 'svc') return null;
  return { name: parts[0], port };
}

// The port a replica listens on for replication: that of its own entry
// (--replica, resolved with the pod template's `labels`) of
// --replication-addresses; undefined when the flags do not tell.
function replicationPort(c, labels) {
  const entries = (flagValue(c.args, 'replication-addresses') || '').split(',').filter(Boolean);
  const own = entries[Number(resolveVars(flagValue(c.args, 'replica'), c, labels))];
  const port = own === undefined ? NaN : Number(own.slice(own.lastIndexOf(':') + 1));
  return Number.isInteger(port) ? port : undefined;
}

function checkContainer(pod, c, isInit, findings, add) {
  const spec = pod.template.spec || {};
  const psc = spec.securityContext || {};
  const sc = c.securityContext || {};
  const where = `${pod.where} container ${c.name}`;
  const sidecar = isInit && c.restartPolicy === 'Always';
  const longRunning = sidecar || (!isInit && pod.longRunning);
  const daemon = (c.command || [])[0];
  const ports = (c.ports || []);
  const elected = isElectedCoordinator(c);
  const replica = isPsReplica(c);

  // Image pinned by tag or digest.
  const image = c.image || '';
  const lastPart = image.slice(image.lastIndexOf('/') + 1);
  if (!image.includes('@sha256:') && (!lastPart.includes(':') || lastPart.endsWith(':latest'))) {
    add(where, `image "${image}" is not pinned by a tag or digest`);
  }
  // Requests and a memory limit.
  const res = c.resources || {};
  for (const r of ['cpu', 'memory']) {
    if (!res.requests || res.requests[r] === undefined) add(where, `resources.requests.${r} is missing`);
  }
  if (!res.limits || res.limits.memory === undefined) add(where, 'resources.limits.memory is missing');
  // GPUs: a limit (requests, where given, equal it) and a node selection.
  const gpuReq = res.requests && res.requests['nvidia.com/gpu'];
  const gpuLim = res.limits && res.limits['nvidia.com/gpu'];
  if (gpuReq !== undefined || gpuLim !== undefined) {
    if (gpuLim === undefined) add(where, 'nvidia.com/gpu must be set in resources.limits');
    else if (gpuReq !== undefined && String(gpuReq) !== String(gpuLim)) {
      add(where, `nvidia.com/gpu request ${gpuReq} differs from its limit ${gpuLim}`);
    }
    const aff = spec.affinity && spec.affinity.nodeAffinity;
    if (!spec.nodeSelector && !aff) add(pod.where, 'GPU pods need a nodeSelector or node affinity');
  }
  // Restricted security context.
  const runAsNonRoot = sc.runAsNonRoot !== undefined ? sc.runAsNonRoot : psc.runAsNonRoot;
  const runAsUser = sc.runAsUser !== undefined ? sc.runAsUser : psc.runAsUser;
  const seccomp = (sc.seccompProfile || psc.seccompProfile || {}).type;
  if (runAsNonRoot !== true) add(where, 'runAsNonRoot must be true (pod or container securityContext)');
  if (runAsUser === undefined || runAsUser === 0) add(where, 'runAsUser must be a fixed non-zero uid');
  if (!['RuntimeDefault', 'Localhost'].includes(seccomp)) add(where, 'seccompProfile.type must be RuntimeDefault (or Localhost)');
  if (sc.allowPrivilegeEscalation !== false) add(where, 'securityContext.allowPrivilegeEscalation must be false');
  if (sc.privileged === true) add(where, 'securityContext.privileged must not be true');
  if (!((sc.capabilities || {}).drop || []).includes('ALL')) add(where, 'securityContext.capabilities.drop must include ALL');
  if ((sc.capabilities || {}).add && sc.capabilities.add.length) add(where, 'securityContext.capabilities.add must be empty');
  if (sc.readOnlyRootFilesystem !== true) add(where, 'securityContext.readOnlyRootFilesystem must be true');
  if (sc.readOnlyRootFilesystem === true) {
    const tmp = (c.volumeMounts || []).find((m) => m.mountPath === '/tmp');
    const vol = tmp && (spec.volumes || []).find((v) => v.name === tmp.name);
    if (!vol || !vol.emptyDir) add(where, 'a read-only root filesystem needs an emptyDir mounted at /tmp');
  }
  // Probes: long-running containers have readiness, liveness and startup
  // probes; every probe port is one the container declares.
  const probes = ['readinessProbe', 'livenessProbe', 'startupProbe'];
  if (longRunning) {
    for (const p of probes) if (!c[p]) add(where, `${p} is missing`);
  }
  for (const p of probes) {
    if (!c[p]) continue;
    const pp = probePort(c[p]);
    if (!pp) continue;
    // A daemon serving TLS (--tls-cert) answers health only over TLS, which
    // the kubelet's grpc probe cannot speak: a tcpSocket probe of the port.
    // An elected coordinator (--etcd-endpoints) answers UNAVAILABLE while it
    // stands by: a grpc probe would keep the standby from starting, restart
    // it, and stall rollouts and drains on it; a tcpSocket probe only.
    // A PS replica (--replica) listens on its serving port only while it is
    // the primary, and its replication port (open from the start, backup
    // too) serves no grpc.health.v1: a tcpSocket probe of that port.
    const tls = (c.args || []).some((x) => String(x).startsWith('--tls-cert'));
    if (elected && pp.kind !== 'tcpSocket') {
      add(where, `${p} must be a tcpSocket probe: an elected coordinator (--etcd-endpoints) fails grpc health checks (UNAVAILABLE) while it stands by`);
    } else if (replica) {
      const rport = replicationPort(c, pod.labels);
      const port = typeof pp.port === 'number' ? pp.port
        : ports.filter((x) => x.name === pp.port).map((x) => x.containerPort)[0];
      if (pp.kind !== 'tcpSocket' || port !== rport) {
        add(where, `${p} must be a tcpSocket probe of the replication port (${rport === undefined ? 'its --replication-addresses entry names none' : rport}): a PS replica (--replica) listens on its serving port only while primary, and its replication port serves no grpc.health.v1`);
      }
    } else if (!elected && STRATA_DAEMONS.has(daemon) && pp.kind !== 'grpc' &&
        !(tls && pp.kind === 'tcpSocket')) {
      add(where, `${p} should be a native grpc probe (${daemon} serves grpc.health.v1)` +
          (tls ? ' or, with --tls-cert, a tcpSocket probe' : ''));
    }
    if (typeof pp.port === 'number') {
      if (!ports.some((x) => x.containerPort === pp.port)) {
        add(where, `${p} ${pp.kind} port ${pp.port} is not a containerPort (${ports.map((x) => x.containerPort).join(', ') || 'none'})`);
      }
    } else if (!ports.some((x) => x.name === pp.port)) {
      add(where, `${p} ${pp.kind} port "${pp.port}" names no container port`);
    }
  }
  // $(VAR) references in command and args resolve to the container's env
  // (the kubelet leaves unknown ones as literal text).
  const env = new Set((c.env || []).map((e) => e.name));
  for (const a of (c.command || []).concat(c.args || [])) {
    for (const m of String(a).matchAll(/(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
      if (!env.has(m[1])) add(where, `"${a}" refers to $(${m[1]}), which is not in env`);
    }
  }
  // Daemons listen on all interfaces in pods. A PS replica too: its address
  // lists name Services, which no interface of the pod has; with --host it
  // binds there with the ports of its own entries (without, on the
  // entries' hosts). It ignores the flags of a one-process task.
  const host = flagValue(c.args, 'host');
  if (replica && host === undefined) {
    add(where, '--host is missing: a PS replica (--replica) binds the host of its own --replica-addresses and --replication-addresses entries without it, a Service name no interface of the pod has; --host=0.0.0.0 (or ::) has it listen there with its entries\' ports');
  } else if (STRATA_DAEMONS.has(daemon) && host !== undefined && host !== '0.0.0.0' && host !== '::') {
    add(where, `--host=${host}: ${daemon} must listen on 0.0.0.0 in a pod`);
  }
  if (replica) {
    for (const f of ['port', 'advertise', 'shutdown-delay-seconds']) {
      const v = flagValue(c.args, f);
      if (v !== undefined) {
        add(where, `--${f}=${v}: a PS replica (--replica) ignores it (it listens with the ports of its own --replica-addresses and --replication-addresses entries, advertises --replica-addresses, and stops at SIGTERM, its backup taking over)`);
      }
    }
  }
  // The grace period covers what the daemon does after SIGTERM: a PS keeps
  // serving for --shutdown-delay-seconds, a coordinator waits up to
  // --final-checkpoint-seconds for its final checkpoint, then both drain.
  const phases = ['shutdown-delay-seconds', 'final-checkpoint-seconds', 'drain-seconds']
    .filter((f) => flagValue(c.args, f) !== undefined);
  if (phases.length > 0) {
    const total = phases.reduce((sum, f) => sum + Number(flagValue(c.args, f)), 0);
    const grace = spec.terminationGracePeriodSeconds;
    if (grace === undefined || grace < total + 10) {
      add(pod.where, `terminationGracePeriodSeconds (${grace === undefined ? 'default 30' : grace}) must exceed ${phases.map((f) => `--${f}=${flagValue(c.args, f)}`).join(' + ')} by at least 10`);
    }
  }
}

function policyLayer(files) {
  const findings = [];
  const items = loadObjects(files, 'policy', findings);
  const objects = items.map((i) => i.obj);
  const byKind = (k) => items.filter((i) => i.obj.kind === k);
  const nsOf = (obj) => (obj.metadata || {}).namespace || '';
  const add = (item) => (where, what) => findings.push(`policy: ${item.file}: ${where}: ${what}`);

  // Labels on every object.
  for (const item of items) {
    const labels = (item.obj.metadata || {}).labels || {};
    for (const l of REQUIRED_LABELS) {
      if (!labels[l]) add(item)(idOf(item.obj), `label ${l} is missing`);
    }
  }

  const pods = podTemplates(items);
  for (const pod of pods) {
    const a = add(pod.item);
    const spec = pod.template.spec || {};
    for (const l of ['app.kubernetes.io/name', ROLE_LABEL]) {
      if (!pod.labels[l]) a(pod.where, `pod template label ${l} is missing`);
    }
    if (spec.automountServiceAccountToken !== false) a(pod.where, 'automountServiceAccountToken must be false');
    if (!spec.serviceAccountName || spec.serviceAccountName === 'default') {
      a(pod.where, 'serviceAccountName must name a dedicated service account');
    } else {
      const sa = objects.find((o) => o.kind === 'ServiceAccount' && o.metadata &&
          o.metadata.name === spec.serviceAccountName && nsOf(o) === pod.ns);
      if (sa && sa.automountServiceAccountToken !== false) {
        a(`ServiceAccount/${sa.metadata.name}`, 'automountServiceAccountToken must be false');
      }
    }
    if (pod.longRunning && spec.terminationGracePeriodSeconds === undefined) {
      a(pod.where, 'terminationGracePeriodSeconds must be set (it must cover a final checkpoint)');
    }
    (spec.containers || []).forEach((c) => checkContainer(pod, c, false, findings, a));
    (spec.initContainers || []).forEach((c) => checkContainer(pod, c, true, findings, a));
    if (pod.tfReplica && !(spec.containers || []).some((c) => c.name === 'tensorflow')) {
      a(pod.where, 'the training operator injects TF_CONFIG only into a container named "tensorflow"');
    }
    // A PodDisruptionBudget per role.
    if (pod.longRunning || pod.tfReplica) {
      const pdb = byKind('PodDisruptionBudget').find((i) => nsOf(i.obj) === pod.ns &&
          selectorMatches((i.obj.spec || {}).selector, pod.labels));
      if (!pdb) a(pod.where, `no PodDisruptionBudget selects role "${pod.role || '?'}"`);
    }
    // PS tasks spread over nodes.
    if (pod.role === 'ps') {
      const spread = (spec.topologySpreadConstraints || []).some((t) => t.topologyKey === 'kubernetes.io/hostname');
      const anti = spec.affinity && spec.affinity.podAntiAffinity;
      if (!spread && !anti) a(pod.where, 'PS pods need a topologySpreadConstraint or podAntiAffinity over kubernetes.io/hostname');
    }
  }

  // StatefulSets of tasks and of etcd members: parallel, behind a headless
  // Service that publishes not-ready addresses (peers find each other while
  // they start). An elected coordinator's replicas need the per-pod names
  // of such a Service too (--advertise-address; a standby is named while
  // not ready), and start in order.
  const containersOf = (obj) => ((((obj.spec || {}).template || {}).spec || {}).containers || []);
  const isEtcd = (obj) => containersOf(obj).some((c) => (c.command || [])[0] === 'etcd');
  for (const item of byKind('StatefulSet')) {
    const { obj } = item;
    const spec = obj.spec || {};
    const role = ((spec.template || {}).metadata || {}).labels || {};
    const peers = role[ROLE_LABEL] === 'ps' || role[ROLE_LABEL] === 'worker' || isEtcd(obj);
    if (!peers && !containersOf(obj).some(isElectedCoordinator)) continue;
    if (peers && spec.podManagementPolicy !== 'Parallel') add(item)(idOf(obj), 'podManagementPolicy must be Parallel');
    const svc = objects.find((o) => o.kind === 'Service' && o.metadata && o.metadata.name === spec.serviceName && nsOf(o) === nsOf(obj));
    if (!svc) {
      add(item)(idOf(obj), `serviceName "${spec.serviceName}" names no Service`);
    } else if ((svc.spec || {}).clusterIP !== 'None' || (svc.spec || {}).publishNotReadyAddresses !== true) {
      add(item)(idOf(obj), `Service ${spec.serviceName} must be headless (clusterIP: None) with publishNotReadyAddresses: true`);
    }
  }

  // Elected coordinators (--etcd-endpoints): each replica advertises its own
  // name, every client lists every replica, the endpoints name every member
  // of the etcd in this render (an etcd elsewhere is not checked) and the
  // coordinators may reach it. Several coordinators without etcd would each
  // run the job on a state of their own. etcd members: named after their
  // pods, --initial-cluster lists every replica, an odd count, and the
  // members may reach each other.
  const nsPolicies = (ns) => byKind('NetworkPolicy').filter((i) => nsOf(i.obj) === ns).map((i) => i.obj.spec || {});
  const replicasOf = (obj) => ((obj.spec || {}).replicas === undefined ? 1 : obj.spec.replicas);
  // "NAME-i.SERVICE:PORT" for every replica i of a StatefulSet.
  const memberAddresses = (obj, port) => Array.from({ length: replicasOf(obj) },
      (_, i) => `${obj.metadata.name}-${i}.${(obj.spec || {}).serviceName}:${port}`);
  const podNameEnv = (c) => (c.env || []).some((e) => e.name === 'POD_NAME' && e.valueFrom &&
      e.valueFrom.fieldRef && e.valueFrom.fieldRef.fieldPath === 'metadata.name');
  for (const item of byKind('StatefulSet')) {
    const { obj } = item;
    const a = add(item);
    const w = idOf(obj);
    const ns = nsOf(obj);
    const spec = obj.spec || {};
    const replicas = replicasOf(obj);
    const self = pods.find((p) => p.item === item);
    for (const c of containersOf(obj)) {
      const cw = `${w} container ${c.name}`;
      const command = (c.command || [])[0];
      if (command === 'strata-coordinator' && !isElectedCoordinator(c)) {
        if (replicas > 1) {
          a(w, `${replicas} replicas of strata-coordinator without --etcd-endpoints: each would run the job on a state of its own (elect them through etcd, or run one)`);
        }
      } else if (command === 'strata-coordinator') {
        const grpc = (c.ports || []).find((x) => x.name === 'grpc');
        const port = flagValue(c.args, 'port') || (grpc ? grpc.containerPort : '?');
        const mine = `$(POD_NAME).${spec.serviceName}:${port}`;
        const advertise = flagValue(c.args, 'advertise-address');
        if (advertise === undefined || podAddress(advertise, ns) !== mine) {
          a(cw, `--advertise-address${advertise === undefined ? ' is missing' : `=${advertise}`}: an elected coordinator advertises its name through the headless Service, ${mine} (or $(POD_NAME).${spec.serviceName}.$(POD_NAMESPACE).svc:${port})`);
        } else if (!podNameEnv(c)) {
          a(cw, 'POD_NAME (in --advertise-address) must come from the pod\'s name (fieldRef metadata.name)');
        }
        const replicaAddresses = memberAddresses(obj, port);
        for (const pod of pods.filter((p) => p.ns === ns)) {
          const ps = pod.template.spec || {};
          for (const cc of (ps.initContainers || []).concat(ps.containers || [])) {
            const list = flagValue(cc.args, 'coordinator');
            if (list === undefined) continue;
            if (!sameMembers(list.split(',').map((x) => podAddress(x, ns)), replicaAddresses)) {
              add(pod.item)(`${pod.where} container ${cc.name}`, `--coordinator=${list} must list every replica of the elected ${w}: ${replicaAddresses.join(',')} (each may end in .$(POD_NAMESPACE).svc)`);
            }
          }
        }
        const etcd = byKind('StatefulSet').find((i) => nsOf(i.obj) === ns && isEtcd(i.obj));
        if (!etcd) continue;
        const ec = containersOf(etcd.obj).find((x) => (x.command || [])[0] === 'etcd');
        const clientPort = urlPort(flagValue(ec.args, 'listen-client-urls')) || 2379;
        const members = memberAddresses(etcd.obj, clientPort);
        const endpoints = flagValue(c.args, 'etcd-endpoints');
        if (!sameMembers(endpoints.split(',').map((x) => podAddress(x, ns)), members)) {
          a(cw, `--etcd-endpoints=${endpoints} must list every member of ${idOf(etcd.obj)}: ${members.join(',')} (each may end in .$(POD_NAMESPACE).svc)`);
        }
        const to = pods.find((p) => p.item === etcd);
        if (self && to && !flowAllowed(nsPolicies(ns), ns, self, to, clientPort)) {
          a(w, `no NetworkPolicy lets it reach ${idOf(etcd.obj)} on port ${clientPort} (egress from the coordinator, ingress to etcd)`);
        }
      } else if (command === 'etcd') {
        const name = flagValue(c.args, 'name');
        if (name !== '$(POD_NAME)' || !podNameEnv(c)) {
          a(cw, `--name${name === undefined ? ' is missing' : `=${name}`}: each member is named after its pod (--name=$(POD_NAME), POD_NAME from fieldRef metadata.name), as --initial-cluster names them`);
        }
        const peerPort = urlPort(flagValue(c.args, 'listen-peer-urls')) || 2380;
        const clientPort = urlPort(flagValue(c.args, 'listen-client-urls')) || 2379;
        for (const [flag, p] of [['initial-advertise-peer-urls', peerPort], ['advertise-client-urls', clientPort]]) {
          const value = flagValue(c.args, flag);
          const want = `$(POD_NAME).${spec.serviceName}:${p}`;
          if (value === undefined || value.split(',').some((u) => podAddress(u, ns) !== want)) {
            a(cw, `--${flag}${value === undefined ? ' is missing' : `=${value}`}: a member advertises its name through the headless Service, http://${want}`);
          }
        }
        const initial = flagValue(c.args, 'initial-cluster') || '';
        const want = memberAddresses(obj, peerPort).map((x) => `${x.split('.')[0]}=${x}`);
        const got = initial.split(',').filter(Boolean).map((m) => {
          const eq = m.indexOf('=');
          return `${m.slice(0, eq)}=${podAddress(m.slice(eq + 1), ns)}`;
        });
        if (!sameMembers(got, want)) {
          a(cw, `--initial-cluster=${initial} must name the ${replicas} replicas: ${want.map((x) => x.replace('=', '=http://')).join(',')}`);
        }
        if (replicas % 2 === 0) {
          a(w, `${replicas} etcd members tolerate no more failures than ${replicas - 1}: run an odd number`);
        }
        if (replicas > 1 && self && !flowAllowed(nsPolicies(ns), ns, self, self, peerPort)) {
          a(w, `no NetworkPolicy lets its members reach each other on port ${peerPort}`);
        }
      }
    }
  }

  // Replicated PS tasks (strata-ps --replica): one StatefulSet per replica
  // index, each pod replica r of the task given by its ordinal. Within a
  // namespace they run the same number of tasks and select apart. Every
  // pod gets the same two address lists, whose entry j is, in the pod of
  // task i, a Service of the namespace (a name $(PS_TASK) makes task i's)
  // that selects just replica j's pod of task i and forwards the entry's
  // port to the same port of the pod: replica j listens on --host with that
  // port, its grpc port in --replica-addresses. A ClusterIP Service, as
  // clients resolve a replica set's names once, when they create a channel
  // (a headless name gives the pod's IP, which changes when it restarts),
  // routing whatever the pod's readiness (publishNotReadyAddresses: a
  // replica's only route). The replicas may reach each other on the
  // replication port, a task's replicas keep off each other's nodes, and at
  // most one StatefulSet rolls on its own (rolling both restarts both
  // replicas of a task at once).
  const replicaSets = byKind('StatefulSet').filter((i) => containersOf(i.obj).some(isPsReplica));
  const psReplicaGroups = new Map();
  for (const item of replicaSets) {
    const ns = nsOf(item.obj);
    if (!psReplicaGroups.has(ns)) psReplicaGroups.set(ns, []);
    const c = containersOf(item.obj).find(isPsReplica);
    const pod = pods.find((p) => p.item === item);
    const index = Number(resolveVars(flagValue(c.args, 'replica'), c, pod.labels));
    psReplicaGroups.get(ns).push({ item, c, pod, index, w: idOf(item.obj), spec: item.obj.spec || {} });
  }
  for (const [ns, group] of psReplicaGroups) {
    const serving = (m) => flagValue(m.c.args, 'replica-addresses');
    const replication = (m) => flagValue(m.c.args, 'replication-addresses');
    const n = (serving(group[0]) || '').split(',').filter(Boolean).length;
    const byIndex = new Map();
    for (const m of group) {
      const a = add(m.item);
      const cw = `${m.w} container ${m.c.name}`;
      if (!Number.isInteger(m.index) || m.index < 0) {
        a(cw, `--replica=${flagValue(m.c.args, 'replica')} is not a replica index (a number, or $(VAR) from a label of the pod template)`);
      } else if (byIndex.has(m.index)) {
        a(m.w, `runs replica ${m.index}, as ${byIndex.get(m.index).w} does: each replica index is one StatefulSet`);
      } else {
        byIndex.set(m.index, m);
      }
      const fromName = flagValue(m.c.args, 'task-index-from-name');
      const index = flagValue(m.c.args, 'task-index');
      const ordinal = (fromName === '$(POD_NAME)' && podNameEnv(m.c)) ||
          (index !== undefined && /^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$/.test(index) &&
           envFromLabel(m.c, index.slice(2, -1), POD_INDEX_LABEL));
      if (!ordinal) {
        a(cw, 'the task index must be the pod\'s ordinal (--task-index-from-name=$(POD_NAME), POD_NAME from fieldRef metadata.name), as the address lists name the pods by it');
      }
      if (replicasOf(m.item.obj) !== replicasOf(group[0].item.obj)) {
        a(m.w, `runs ${replicasOf(m.item.obj)} PS tasks but ${group[0].w} runs ${replicasOf(group[0].item.obj)}: every task needs one pod of each replica StatefulSet`);
      }
      for (const o of group) {
        if (o !== m && selectorMatches(m.spec.selector, o.pod.labels)) {
          a(m.w, `its selector also matches the pods of ${o.w} (give each replica StatefulSet a label of its own, e.g. strata/ps-replica)`);
        }
      }
    }
    for (let j = 0; j < n; j++) {
      if (!byIndex.has(j)) {
        add(group[0].item)(group[0].w, `no StatefulSet runs replica ${j} of the ${n} that --replica-addresses lists`);
      }
    }
    // The tasks every replica StatefulSet runs, the pods of the namespace,
    // and each finding about a Service once.
    const tasks = Math.min(...group.map((m) => replicasOf(m.item.obj)));
    const nsPods = pods.filter((p) => p.ns === ns);
    const reported = new Set();
    const once = (key, report) => {
      if (!reported.has(key)) report();
      reported.add(key);
    };
    for (const m of group) {
      const a = add(m.item);
      const cw = `${m.w} container ${m.c.name}`;
      const lists = [['replica-addresses', 'grpc'], ['replication-addresses', null]];
      for (const [flag, portName] of lists) {
        const value = flagValue(m.c.args, flag);
        const entries = (value || '').split(',').filter(Boolean);
        if (entries.length !== n || n < 2) {
          a(cw, `--${flag}${value === undefined ? ' is missing' : `=${value}`}: it lists every replica of the task (${n} in --replica-addresses, at least 2)`);
          continue;
        }
        entries.forEach((entry, j) => {
          const to = byIndex.get(j);
          if (!to) return;
          const toPorts = to.c.ports || [];
          const want = toPorts.filter((x) => !portName || x.name === portName).map((x) => x.containerPort);
          for (let i = 0; i < tasks; i++) {
            const resolved = resolveVars(entry, m.c, m.pod.labels, { name: `${m.item.obj.metadata.name}-${i}`, ordinal: i });
            const e = serviceEntry(resolved, m.c, ns);
            if (!e) {
              a(cw, `--${flag} entry ${j} is "${entry}", "${resolved}" in the pod of task ${i}: not HOST:PORT with HOST a Service of the namespace (NAME, NAME.$(POD_NAMESPACE).svc or NAME.$(POD_NAMESPACE).svc.<cluster domain>, POD_NAMESPACE from fieldRef metadata.namespace; NAME the task's through $(PS_TASK) from fieldRef metadata.labels['${POD_INDEX_LABEL}'])`);
              break;
            }
            if (!want.includes(e.port)) {
              a(cw, `--${flag} entry ${j} is "${entry}": replica ${j} (${to.w}) listens on --host with the entry's port ${e.port}, but its ${portName ? `${portName} containerPort is` : 'containerPorts are'} ${want.join(', ') || 'none'}`);
              break;
            }
            const pod = `${to.item.obj.metadata.name}-${i}`;
            const role = `--${flag} entry ${j} of ${m.w} (${resolved}), replica ${j} of PS task ${i}`;
            const svc = byKind('Service').find((x) => x.obj.metadata && x.obj.metadata.name === e.name && nsOf(x.obj) === ns);
            if (!svc) {
              once(`${ns}/${e.name}`, () => a(m.w, `no Service ${e.name} for replica ${j} of PS task ${i} (--${flag} entry ${j}: ${resolved}): add a ClusterIP Service ${e.name} selecting ${POD_NAME_LABEL}: ${pod}, with its port ${e.port} to the pod's port ${e.port}`));
              continue;
            }
            const sa = add(svc);
            const sw = idOf(svc.obj);
            const sspec = svc.obj.spec || {};
            if (sspec.clusterIP === 'None' || sspec.type === 'ExternalName') {
              once(`${sw}/clusterIP`, () => sa(sw, `must be a ClusterIP Service, not ${sspec.type === 'ExternalName' ? 'an ExternalName one' : 'a headless one (clusterIP: None)'}: it is ${role}, and clients resolve a replica set's names once, when they create a channel: a ClusterIP stays, a pod's IP changes when the pod restarts`));
            }
            if (sspec.publishNotReadyAddresses !== true) {
              once(`${sw}/notReady`, () => sa(sw, `publishNotReadyAddresses must be true: it is ${role}, the replica's only route, which its readiness must not gate (a backup's replication port is dialled back as soon as it listens)`));
            }
            const selected = nsPods.flatMap((p) => p.instances
                .filter((x) => sspec.selector && selectorMatches({ matchLabels: sspec.selector }, x.labels))
                .map((x) => x.name || p.where));
            if (selected.length !== 1 || selected[0] !== pod) {
              once(`${sw}/selects/${pod}`, () => sa(sw, `selects ${selected.length ? `pod${selected.length > 1 ? 's' : ''} ${selected.join(', ')}` : 'no pod'}, but it is ${role}: it must select just pod ${pod} (${POD_NAME_LABEL}: ${pod})`));
            }
            const forwards = (sspec.ports || []).some((x) => x.port === e.port && (x.protocol || 'TCP') === 'TCP' &&
                (x.targetPort === undefined ? x.port === e.port
                  : x.targetPort === e.port || toPorts.some((y) => y.name === x.targetPort && y.containerPort === e.port)));
            if (!forwards) {
              once(`${sw}/port/${e.port}`, () => sa(sw, `no port ${e.port} to the pod's port ${e.port}: it is ${role}, which listens there`));
            }
          }
        });
      }
      const sp = (serving(m) || '').split(',').map((x) => x.slice(x.lastIndexOf(':') + 1));
      const rp = (replication(m) || '').split(',').map((x) => x.slice(x.lastIndexOf(':') + 1));
      if (sp.some((p, j) => p === rp[j])) a(cw, 'a replica\'s serving and replication ports must differ');
      // The same lists, as the pods see them, in every replica: clients and
      // the coordinator know the task by the list its primary registers.
      const o = group[0];
      if (m !== o) {
        for (const flag of ['replica-addresses', 'replication-addresses']) {
          const mine = resolveVars(flagValue(m.c.args, flag) || '', m.c, {});
          const theirs = resolveVars(flagValue(o.c.args, flag) || '', o.c, {});
          if (mine !== theirs) {
            a(cw, `--${flag}=${mine} disagrees with ${o.w}'s (${theirs}): both replicas of a task must list the same addresses in the same order`);
          }
        }
      }
      // Partners apart, the replication flow open, one automatic rollout.
      for (const to of group) {
        if (to === m) continue;
        const anti = (m.pod.template.spec || {}).affinity && m.pod.template.spec.affinity.podAntiAffinity || {};
        const terms = (anti.requiredDuringSchedulingIgnoredDuringExecution || [])
          .concat((anti.preferredDuringSchedulingIgnoredDuringExecution || []).map((t) => t.podAffinityTerm || {}));
        if (!terms.some((t) => t.topologyKey === 'kubernetes.io/hostname' && selectorMatches(t.labelSelector, to.pod.labels))) {
          a(m.w, `no podAntiAffinity term over kubernetes.io/hostname keeps its pods off the nodes of ${to.w}'s (the other replica of each task)`);
        }
        for (const rport of [replicationPort(to.c, to.pod.labels)].filter((p) => p !== undefined)) {
          if (!flowAllowed(nsPolicies(ns), ns, m.pod, to.pod, rport)) {
            a(m.w, `no NetworkPolicy lets it reach ${to.w} on the replication port ${rport} (egress from and ingress to the PS pods)`);
          }
        }
      }
    }
    const rolling = group.filter((m) => ((m.spec.updateStrategy || {}).type || 'RollingUpdate') === 'RollingUpdate');
    if (rolling.length > 1) {
      add(rolling[1].item)(rolling[1].w, `it and ${rolling.filter((m) => m !== rolling[1]).map((m) => m.w).join(', ')} roll on their own (updateStrategy RollingUpdate): each rolls from its highest ordinal down, restarting both replicas of a task together; give all but one updateStrategy OnDelete`);
    }
  }

  // strata submit (outside a TFJob, whose operator gives it TF_CONFIG)
  // waits for the tasks before it submits: the TF_CONFIG of a static
  // cluster, or --wait-ps and --wait-workers, which must count the tasks of
  // the render.
  const tasksOf = (role, ns) => {
    const sets = byKind('StatefulSet').filter((i) => nsOf(i.obj) === ns &&
        (((((i.obj.spec || {}).template || {}).metadata || {}).labels || {})[ROLE_LABEL] === role));
    if (!sets.length) return undefined;
    // The replicas of a task run in StatefulSets of their own.
    const replicated = sets.filter((i) => containersOf(i.obj).some(isPsReplica));
    return replicasOf((replicated.length ? replicated : sets)[0].obj);
  };
  for (const pod of pods.filter((p) => !p.tfReplica)) {
    for (const c of (pod.template.spec || {}).containers || []) {
      if ((c.command || [])[0] !== 'strata' || ((c.command || [])[1] || (c.args || [])[0]) !== 'submit') continue;
      const tf = (c.env || []).some((e) => e.name === 'TF_CONFIG');
      for (const [flag, role] of [['wait-ps', 'ps'], ['wait-workers', 'worker']]) {
        const v = flagValue(c.args, flag);
        const tasks = tasksOf(role, pod.ns);
        if (v === undefined && !tf) {
          add(pod.item)(`${pod.where} container ${c.name}`, `neither TF_CONFIG nor --${flag}: strata submit would submit before the ${role} tasks registered`);
        } else if (v !== undefined && tasks !== undefined && Number(v) !== tasks) {
          add(pod.item)(`${pod.where} container ${c.name}`, `--${flag}=${v} but the render runs ${tasks} ${role} tasks`);
        }
      }
    }
  }

  // Services select pods (by the labels of their templates, or by those a
  // StatefulSet's controller adds: one pod by its name), and their named
  // target ports exist.
  for (const item of byKind('Service')) {
    const sel = (item.obj.spec || {}).selector;
    if (!sel) continue;
    const matched = pods.filter((p) => p.ns === nsOf(item.obj) &&
        p.instances.some((x) => selectorMatches({ matchLabels: sel }, x.labels)));
    if (!matched.length) {
      add(item)(idOf(item.obj), 'its selector matches no pod template');
      continue;
    }
    for (const port of (item.obj.spec || {}).ports || []) {
      if (typeof port.targetPort !== 'string') continue;
      const ok = matched.every((p) => ((p.template.spec || {}).containers || [])
          .some((c) => (c.ports || []).some((x) => x.name === port.targetPort)));
      if (!ok) add(item)(idOf(item.obj), `targetPort "${port.targetPort}" is not a named port of the pods it selects`);
    }
  }

  // The cluster spec in the ConfigMap agrees with the workloads.
  for (const item of byKind('ConfigMap')) {
    const data = item.obj.data || {};
    const w = idOf(item.obj);
    for (const key of Object.keys(data)) {
      if (!key.endsWith('.json') && key !== 'TF_CONFIG') continue;
      try {
        JSON.parse(data[key]);
      } catch (e) {
        add(item)(w, `data.${key} is not valid JSON: ${e.message}`);
      }
    }
    // The job's strategy.ps_replication is the number of replica
    // StatefulSets of the PS tasks (1: one process per task).
    const group = psReplicaGroups.get(nsOf(item.obj)) || [];
    const psSets = byKind('StatefulSet').filter((i) => nsOf(i.obj) === nsOf(item.obj) &&
        ((((i.obj.spec || {}).template || {}).metadata || {}).labels || {})[ROLE_LABEL] === 'ps');
    let job;
    try {
      job = data['job.json'] === undefined ? undefined : JSON.parse(data['job.json']);
    } catch (e) {
      job = undefined;
    }
    if (job && typeof job === 'object' && psSets.length) {
      const replication = ((job.strategy || {}).ps_replication) || 1;
      const runs = group.length || 1;
      if (replication !== runs) {
        add(item)(w, `job.json strategy.ps_replication is ${replication} but ${group.length ? `the PS tasks run as ${runs} replicas (${group.map((m) => m.w).join(', ')})` : `${psSets.map((i) => idOf(i.obj)).join(', ')} runs one process per PS task (no --replica)`}`);
      }
    }
    if (data.TF_CONFIG === undefined) continue;
    let tf;
    try {
      tf = JSON.parse(data.TF_CONFIG);
    } catch (e) {
      continue;
    }
    const cluster = (tf && tf.cluster) || {};
    if (tf.task !== undefined) add(item)(w, 'TF_CONFIG in a shared ConfigMap must not name a task');
    const consumer = pods.find((p) => ((p.template.spec || {}).containers || []).some((c) =>
        (c.env || []).some((e) => e.name === 'TF_CONFIG' && e.valueFrom && e.valueFrom.configMapKeyRef &&
            e.valueFrom.configMapKeyRef.name === item.obj.metadata.name)));
    if (!consumer) add(item)(w, 'no container takes its TF_CONFIG (the coordinator should, as its static cluster)');
    for (const role of ['ps', 'worker']) {
      if (role === 'ps' && group.length) {
        // A replicated task registers both replicas' serving addresses
        // ("P0,P1"), which a TF_CONFIG address cannot be; the clients must
        // take the PS addresses from the coordinator's registrations.
        if (cluster.ps !== undefined) {
          add(item)(w, `TF_CONFIG lists ps tasks, but the PS tasks are replicated (${group.map((m) => m.w).join(', ')}): a static cluster cannot hold a task's two addresses; leave TF_CONFIG out (the coordinator takes the tasks as they register, strata submit waits with --wait-ps)`);
        }
        continue;
      }
      const sts = byKind('StatefulSet').find((i) => nsOf(i.obj) === nsOf(item.obj) &&
          ((((i.obj.spec || {}).template || {}).metadata || {}).labels || {})[ROLE_LABEL] === role);
      const listed = Array.isArray(cluster[role]) ? cluster[role] : [];
      if (!sts) {
        if (listed.length) add(item)(w, `TF_CONFIG lists ${listed.length} ${role} tasks but no StatefulSet has role ${role}`);
        continue;
      }
      const spec = sts.obj.spec || {};
      const replicas = spec.replicas === undefined ? 1 : spec.replicas;
      if (replicas !== listed.length) {
        add(item)(w, `TF_CONFIG lists ${listed.length} ${role} tasks but StatefulSet/${sts.obj.metadata.name} has ${replicas} replicas`);
      }
      const container = ((spec.template || {}).spec || {}).containers || [];
      const grpc = container.flatMap((c) => c.ports || []).find((x) => x.name === 'grpc');
      listed.forEach((address, i) => {
        const want = `${sts.obj.metadata.name}-${i}.${spec.serviceName}:${grpc ? grpc.containerPort : '?'}`;
        if (address !== want) add(item)(w, `TF_CONFIG ${role}[${i}] is "${address}"; the StatefulSet's task ${i} is "${want}"`);
      });
    }
    for (const address of cluster.chief || []) {
      const [host, port] = String(address).split(':');
      const svc = objects.find((o) => o.kind === 'Service' && o.metadata && o.metadata.name === host && nsOf(o) === nsOf(item.obj));
      if (!svc || !((svc.spec || {}).ports || []).some((p) => String(p.port) === port)) {
        add(item)(w, `TF_CONFIG chief "${address}" is not a Service name and port in this render`);
      }
    }
  }

  // Every pod is under a default-deny NetworkPolicy (both directions, no
  // rules) and may reach DNS. In a namespace of its own the deny selects
  // every pod ({}); in a shared one (a Kubeflow profile) it may select just
  // this deployment's pods.
  for (const pod of pods) {
    const policies = byKind('NetworkPolicy').filter((i) => nsOf(i.obj) === pod.ns)
        .map((i) => i.obj.spec || {}).filter((s) => selectsPod(s.podSelector, pod.labels));
    const deny = policies.some((s) => (s.policyTypes || []).includes('Ingress') &&
        (s.policyTypes || []).includes('Egress') && !(s.ingress || []).length && !(s.egress || []).length);
    if (!deny) {
      add(pod.item)(pod.where, 'no default-deny NetworkPolicy selects its pods (policyTypes Ingress and Egress, no rules)');
    }
    const dns = policies.some((s) => (s.egress || []).some((e) =>
        (e.ports || []).some((x) => x.port === 53 && (x.protocol || 'TCP') === 'UDP')));
    if (!dns) add(pod.item)(pod.where, 'no NetworkPolicy lets its pods reach DNS (egress to port 53/UDP)');
  }
  return findings;
}

// ---------------------------------------------------------------------------
// Dockerfile layer.

function dockerfileLayer(files) {
  const findings = [];
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8').replace(/\\\n/g, ' ');
    const lines = text.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
    const args = {};
    const stages = [];
    for (const line of lines) {
      const [instr, ...rest] = line.split(/\s+/);
      const rest1 = rest.join(' ');
      const up = instr.toUpperCase();
      if (up === 'ARG' && !stages.length) {
        const m = rest1.match(/^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$/);
        if (m) args[m[1]] = m[2];
      } else if (up === 'FROM') {
        let image = rest[0].replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (_, a) => args[a] || '');
        stages.push({ image, name: rest[2] || null, lines: [] });
      } else if (stages.length) {
        stages[stages.length - 1].lines.push({ instr: up, text: rest1 });
      }
    }
    const f = (what) => findings.push(`dockerfile: ${file}: ${what}`);
    if (stages.length < 2) f('expected a multi-stage build (a build stage and a runtime stage)');
    for (const s of stages) {
      if (stages.some((o) => o.name && o.name === s.image)) continue;
      if (!/^(debian):/.test(s.image) || !/bookworm|^debian:12/.test(s.image)) f(`FROM ${s.image}: expected a Debian 12 (bookworm) base`);
      if (!s.image.includes(':') || s.image.endsWith(':latest')) f(`FROM ${s.image}: pin the base image by tag`);
    }
    const final = stages[stages.length - 1];
    if (!final) continue;
    const user = final.lines.filter((l) => l.instr === 'USER').map((l) => l.text).pop();
    if (!user) f('the final stage sets no USER');
    else if (/^(root|0)(:|$)/.test(user) || !/^[1-9][0-9]*(:[1-9][0-9]*)?$/.test(user)) {
      f(`USER ${user}: the final stage must run as a fixed non-root numeric uid`);
    }
    const installs = final.lines.filter((l) => l.instr === 'RUN').map((l) => l.text).join(' ');
    const forbidden = installs.match(/\b(build-essential|gcc(-\d+)?|g\+\+(-\d+)?|clang(-\d+)?|cmake|make|[a-z0-9.+-]+-dev)\b/g);
    if (forbidden) f(`the final stage installs build tools: ${[...new Set(forbidden)].join(', ')}`);
    const copies = final.lines.filter((l) => l.instr === 'COPY').map((l) => l.text).join(' ');
    for (const b of ['strata-coordinator', 'strata-ps', 'strata-worker', 'strata']) {
      const built = stages.slice(0, -1).some((s) => s.lines.some((l) => l.text.includes(`--target`) && new RegExp(`\\b${b}\\b`).test(l.text)));
      if (!built) f(`no build stage builds ${b}`);
    }
    if (!/--from=/.test(copies)) f('the final stage copies nothing from the build stage');
  }
  return findings;
}

// ---------------------------------------------------------------------------

function main() {
  const [layer, ...files] = process.argv.slice(2);
  const layers = { schema: schemaLayer, policy: policyLayer, dockerfile: dockerfileLayer };
  if (!layers[layer] || !files.length) {
    console.error('usage: validate.js schema|policy|dockerfile FILE...');
    process.exit(2);
  }
  const findings = layers[layer](files);
  for (const f of findings) console.log(f);
  if (findings.length) {
    console.log(`${layer}: ${findings.length} finding${findings.length === 1 ? '' : 's'} in ${files.join(' ')}`);
    process.exit(1);
  }
  console.log(`${layer}: ok (${files.join(' ')})`);
}

main();
