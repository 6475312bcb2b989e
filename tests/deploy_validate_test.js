// The offline checks of deploy/ (deploy/validate/check.sh), run by ctest
// with node's own test runner:
//   node --test tests/deploy_validate_test.js
// Every overlay, the TFJob and the Dockerfile pass every layer, and each
// deliberately broken fixture is reported by the layer it targets (and
// passes the layers before it, so each layer is shown to bite on its own).
'use strict';

const { after, test } = require('node:test');
const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const check = path.join(root, 'deploy/validate/check.sh');
const fixtures = path.join(root, 'deploy/validate/fixtures');
const out = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-deploy-'));
after(() => fs.rmSync(out, { recursive: true, force: true }));

function run(...args) {
  const r = spawnSync(check, args, { encoding: 'utf8', timeout: 300000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

function expectFindings(result, layer, expected) {
  assert.strictEqual(result.code, 1, `${layer} should fail:\n${result.out}`);
  for (const e of expected) {
    assert.ok(result.out.includes(e), `${layer} should report "${e}":\n${result.out}`);
  }
}

test('every overlay, the TFJob and the Dockerfile pass render, schema and policy', () => {
  const r = run('--out', out);
  assert.strictEqual(r.code, 0, r.out);
  for (const name of ['dev', 'cpu', 'gpu', 'tls', 'ha', 'replicated-ps', 'kubeflow']) {
    assert.ok(fs.existsSync(path.join(out, `${name}.yaml`)), `${name} rendered`);
    assert.ok(r.out.includes(`schema: ok (${path.join(out, `${name}.yaml`)})`), r.out);
    assert.ok(r.out.includes(`policy: ok (${path.join(out, `${name}.yaml`)})`), r.out);
  }
});

test('render layer: kustomize refuses broken-render.yaml', () => {
  const r = run('render', path.join(fixtures, 'broken-render.yaml'), path.join(out, 'broken-render.out.yaml'));
  expectFindings(r, 'render', ['may not add resource with an already registered id']);
});

test('schema layer: unknown fields, wrong types and formats in broken-schema.yaml', () => {
  const file = path.join(fixtures, 'broken-schema.yaml');
  const rendered = path.join(out, 'broken-schema.out.yaml');
  assert.strictEqual(run('render', file, rendered).code, 0, 'kustomize renders it');
  expectFindings(run('schema', rendered), 'schema', [
    "StatefulSet/strata-ps: spec.replicas: Type 'string' is not assignable to type 'number'",
    "containers[0].ports[0].containerPorts: Object literal may only specify known properties",
    "Property 'containerPort' is missing",
    "readinessProbe.grpc.port: Type 'string' is not assignable to type 'number'",
    'resources.requests.memory: "1 GB" is not a Kubernetes quantity',
    "Service/strata-ps: spec.publishNotReadyAdresses: Object literal may only specify known properties",
    'PodDisruptionBudget/strata-ps: spec.maxUnavailable: 1.5 is not an integer',
    "TFJob/strata-mnist: spec.tfReplicaSpec: Object literal may only specify known properties",
    'kind "Deploymnet" does not exist in apps/v1',
  ]);
});

test('policy layer: deployment rules broken in broken-policy.yaml', () => {
  const file = path.join(fixtures, 'broken-policy.yaml');
  const rendered = path.join(out, 'broken-policy.out.yaml');
  assert.strictEqual(run('render', file, rendered).code, 0, 'kustomize renders it');
  const schema = run('schema', rendered);
  assert.strictEqual(schema.code, 0, `every field is valid:\n${schema.out}`);
  expectFindings(run('policy', rendered), 'policy', [
    'readinessProbe grpc port 5001 is not a containerPort (5000)',
    'livenessProbe should be a native grpc probe',
    'startupProbe is missing',
    'resources.requests.memory is missing',
    'resources.limits.memory is missing',
    'runAsNonRoot must be true',
    'runAsUser must be a fixed non-zero uid',
    'securityContext.allowPrivilegeEscalation must be false',
    'securityContext.capabilities.drop must include ALL',
    'securityContext.readOnlyRootFilesystem must be true',
    'is not pinned by a tag or digest',
    'automountServiceAccountToken must be false',
    'no PodDisruptionBudget selects role "ps"',
    'TF_CONFIG lists 3 ps tasks but StatefulSet/strata-ps has 2 replicas',
    'must be headless (clusterIP: None) with publishNotReadyAddresses: true',
    '--host=127.0.0.1: strata-ps must listen on 0.0.0.0',
    'refers to $(POD_INDEX), which is not in env',
    'must exceed --drain-seconds=60',
    'PS pods need a topologySpreadConstraint or podAntiAffinity',
    'no default-deny NetworkPolicy selects its pods',
    'no NetworkPolicy lets its pods reach DNS',
  ]);
});

test('policy layer: elected coordinators and etcd disagree in broken-ha.yaml', () => {
  const file = path.join(fixtures, 'broken-ha.yaml');
  const rendered = path.join(out, 'broken-ha.out.yaml');
  assert.strictEqual(run('render', file, rendered).code, 0, 'kustomize renders it');
  const schema = run('schema', rendered);
  assert.strictEqual(schema.code, 0, `every field is valid:\n${schema.out}`);
  expectFindings(run('policy', rendered), 'policy', [
    'readinessProbe must be a tcpSocket probe: an elected coordinator (--etcd-endpoints) fails grpc health checks (UNAVAILABLE)',
    'StatefulSet/strata-coordinator: Service strata-coordinator must be headless (clusterIP: None) with publishNotReadyAddresses: true',
    '--advertise-address=strata-coordinator:5000: an elected coordinator advertises its name through the headless Service',
    'Job/strata-submit container submit: --coordinator=strata-coordinator-0.strata-coordinator:5000 must list every replica of the elected StatefulSet/strata-coordinator',
    '--etcd-endpoints=strata-etcd-0.strata-etcd:2379 must list every member of StatefulSet/strata-etcd',
    'StatefulSet/strata-coordinator: no NetworkPolicy lets it reach StatefulSet/strata-etcd on port 2379',
    'StatefulSet/strata-coordinator-plain: 2 replicas of strata-coordinator without --etcd-endpoints',
    'StatefulSet/strata-etcd: podManagementPolicy must be Parallel',
    '--name=etcd: each member is named after its pod',
    '--initial-advertise-peer-urls=http://strata-etcd:2380: a member advertises its name',
    'must name the 2 replicas: strata-etcd-0=http://strata-etcd-0.strata-etcd:2380,strata-etcd-1=http://strata-etcd-1.strata-etcd:2380',
    '2 etcd members tolerate no more failures than 1',
    'StatefulSet/strata-etcd: no NetworkPolicy lets its members reach each other on port 2380',
  ]);
});

test('policy layer: replicated PS tasks disagree in broken-replicated-ps.yaml', () => {
  const file = path.join(fixtures, 'broken-replicated-ps.yaml');
  const rendered = path.join(out, 'broken-replicated-ps.out.yaml');
  assert.strictEqual(run('render', file, rendered).code, 0, 'kustomize renders it');
  const schema = run('schema', rendered);
  assert.strictEqual(schema.code, 0, `every field is valid:\n${schema.out}`);
  expectFindings(run('policy', rendered), 'policy', [
    'StatefulSet/strata-ps-r0 container ps: readinessProbe must be a tcpSocket probe of the replication port (5001)',
    'StatefulSet/strata-ps-r0 container ps: --port=5000: a PS replica (--replica) ignores it',
    'StatefulSet/strata-ps-r1 container ps: --host is missing: a PS replica (--replica) binds the host of its own',
    'StatefulSet/strata-ps-r1: runs 3 PS tasks but StatefulSet/strata-ps-r0 runs 2',
    'StatefulSet/strata-ps-r1: its selector also matches the pods of StatefulSet/strata-ps-r0',
    // The replicas' Services: missing, headless, routing by readiness,
    // selecting the wrong pod, without the replication port.
    'StatefulSet/strata-ps-r0: no Service strata-ps-1-r0 for replica 0 of PS task 1 (--replica-addresses entry 0: strata-ps-1-r0.$(POD_NAMESPACE).svc:5000)',
    'Service/strata-ps-0-r1: must be a ClusterIP Service, not a headless one (clusterIP: None)',
    'Service/strata-ps-1-r1: publishNotReadyAddresses must be true',
    'Service/strata-ps-1-r1: selects pod strata-ps-r1-0, but it is --replica-addresses entry 1 of StatefulSet/strata-ps-r0 (strata-ps-1-r1.$(POD_NAMESPACE).svc:5000), replica 1 of PS task 1: it must select just pod strata-ps-r1-1',
    'Service/strata-ps-0-r0: no port 5001 to the pod\'s port 5001: it is --replication-addresses entry 0 of StatefulSet/strata-ps-r0',
    'Service/strata-ps-2-r0: its selector matches no pod template',
    // Replica 1's lists: in the other order, and a pod's name.
    'Service/strata-ps-0-r1: selects pod strata-ps-r1-0, but it is --replica-addresses entry 0 of StatefulSet/strata-ps-r1 (strata-ps-0-r1.$(POD_NAMESPACE).svc:5000), replica 0 of PS task 0: it must select just pod strata-ps-r0-0',
    'StatefulSet/strata-ps-r1 container ps: --replica-addresses=strata-ps-$(PS_TASK)-r1.$(POD_NAMESPACE).svc:5000,strata-ps-$(PS_TASK)-r0.$(POD_NAMESPACE).svc:5000 disagrees with StatefulSet/strata-ps-r0\'s',
    'StatefulSet/strata-ps-r1 container ps: --replication-addresses entry 0 is "strata-ps-r0-$(PS_TASK).strata-ps:5001", "strata-ps-r0-0.strata-ps:5001" in the pod of task 0: not HOST:PORT with HOST a Service of the namespace',
    'StatefulSet/strata-ps-r0: no podAntiAffinity term over kubernetes.io/hostname keeps its pods off the nodes of StatefulSet/strata-ps-r1\'s',
    'StatefulSet/strata-ps-r0: no NetworkPolicy lets it reach StatefulSet/strata-ps-r1 on the replication port 5001',
    'StatefulSet/strata-ps-r1: it and StatefulSet/strata-ps-r0 roll on their own (updateStrategy RollingUpdate)',
    'Job/strata-submit container submit: --wait-ps=3 but the render runs 2 ps tasks',
    'Job/strata-submit container submit: neither TF_CONFIG nor --wait-workers',
    'ConfigMap/strata-job: job.json strategy.ps_replication is 1 but the PS tasks run as 2 replicas',
    'ConfigMap/strata-job: TF_CONFIG lists ps tasks, but the PS tasks are replicated',
  ]);
});

test('dockerfile layer: broken-dockerfile (one stage, root, compilers)', () => {
  expectFindings(run('dockerfile', path.join(fixtures, 'broken-dockerfile')), 'dockerfile', [
    'expected a multi-stage build',
    'pin the base image by tag',
    'the final stage must run as a fixed non-root numeric uid',
    'the final stage installs build tools: build-essential, cmake',
  ]);
});

// Every --flag a manifest passes to a Strata binary is one the built binary
// accepts (its --help lists them, "  --flag-name=TYPE" or "  --flag" for
// booleans, one per line). Skips when the binaries are not built.
test('every flag in the manifests is one the binaries accept', (t) => {
  const bin = process.env.STRATA_BIN_DIR || path.join(root, 'build/bin');
  if (!fs.existsSync(path.join(bin, 'strata-ps'))) {
    t.skip(`no binaries in ${bin}`);
    return;
  }
  assert.strictEqual(run('--out', out).code, 0);
  const YAML = require(path.join(root, 'deploy/validate/node_modules/yaml'));
  const known = new Map();
  const flagsOf = (argv) => {
    const key = argv.join(' ');
    if (!known.has(key)) {
      const r = spawnSync(path.join(bin, argv[0]), [...argv.slice(1), '--help'],
                          { encoding: 'utf8', timeout: 30000 });
      assert.strictEqual(r.status, 0, `${key} --help exits 0`);
      known.set(key, new Set([...r.stdout.matchAll(/^\s+--([a-z0-9-]+)(=[A-Z]+)?$/gm)]
          .map((m) => m[1].replace(/-/g, '_'))));
    }
    return known.get(key);
  };
  let checked = 0;
  for (const name of ['dev', 'cpu', 'gpu', 'ha', 'replicated-ps', 'kubeflow']) {
    const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(out, `${name}.yaml`), 'utf8'));
    const containers = [];
    const walk = (v) => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object') {
        if (Array.isArray(v.command) && /^strata/.test(v.command[0])) containers.push(v);
        Object.values(v).forEach(walk);
      }
    };
    docs.forEach((d) => walk(d.toJS()));
    assert.ok(containers.length >= 3, `${name}: Strata containers found`);
    for (const c of containers) {
      const flags = flagsOf(c.command);
      assert.ok(flags.size > 5, `${c.command.join(' ')} --help lists its flags`);
      for (const a of c.args || []) {
        const m = a.match(/^--([a-z0-9-_]+)/);
        if (!m) continue;
        const flag = m[1].replace(/-/g, '_');
        assert.ok(flags.has(flag), `${name}: ${c.command.join(' ')} does not accept ${a}`);
        checked++;
      }
    }
  }
  assert.ok(checked > 40, `${checked} flags checked`);
});

test('the npm packages the checks use are pinned with integrity hashes', () => {
  const lock = JSON.parse(fs.readFileSync(path.join(root, 'deploy/validate/package-lock.json'), 'utf8'));
  for (const name of ['kubernetes-types', 'typescript', 'yaml']) {
    const entry = lock.packages[`node_modules/${name}`];
    assert.ok(entry && entry.version && entry.integrity, `${name} pinned with an integrity hash`);
  }
});
