"""Unknown fields are errors, with a did-you-mean; valid fields, however many, are accepted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from scripts.gen_kube_fields import KINDS, field_trees, render

from karpy.api import fields
from karpy.api.fields import (
    OBJECT_META,
    check,
    did_you_mean,
    kind_trees,
    kube_fields,
    resource_name_error,
    unknown_fields,
)
from karpy.api.manifest import PARSERS, KubernetesYAMLLoader, parse_manifests

REPO = Path(__file__).resolve().parents[2]

NODEPOOL = """\
apiVersion: karpenter.sh/{version}
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {node_class_ref}
      requirements: [{{key: kubernetes.io/arch, operator: In, values: [amd64]}}]
{template_spec}
  limits: {{cpu: 100}}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 30s
{disruption}
"""
V1_REF = "{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}"
V1BETA1_REF = "{apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: default}"

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
        - name: app
          image: registry.invalid/app:1
          resources: {requests: {cpu: 500m, memory: 1Gi}}
"""


def nodepool(
    version: str = "v1", template_spec: str = "", disruption: str = "", node_class_ref: str = V1_REF
) -> str:
    return NODEPOOL.format(
        version=version, node_class_ref=node_class_ref, template_spec=template_spec, disruption=disruption
    )


def errors_of(text: str) -> list[str]:
    result = parse_manifests(text, "in.yaml")
    return result.errors


# Each typo of the issue, the line it gets, and the text before it (the typo is made by a replace).
TYPOS = {
    "consolidationPolcy": (
        nodepool(),
        "consolidationPolicy: WhenEmpty",
        "consolidationPolcy: WhenEmpty",
        'in.yaml: NodePool "default": spec.disruption.consolidationPolcy: unknown field '
        '"spec.disruption.consolidationPolcy" (did you mean "consolidationPolicy"?)',
    ),
    "requirments": (
        nodepool(),
        "requirements:",
        "requirments:",
        'in.yaml: NodePool "default": spec.template.spec.requirments: unknown field '
        '"spec.template.spec.requirments" (did you mean "requirements"?)',
    ),
    "cpus": (
        nodepool(),
        "limits: {cpu: 100}",
        "limits: {cpus: 100}",
        'in.yaml: NodePool "default": spec.limits.cpus: unknown resource name "cpus": must be a standard '
        "resource (cpu, ephemeral-storage, memory, nodes, pods, storage, hugepages-<size>) or fully "
        'qualified (example.com/name) (did you mean "cpu"?)',
    ),
    "requets": (
        DEPLOYMENT,
        "resources: {requests:",
        "resources: {requets:",
        'in.yaml: Deployment "app": spec.template.spec.containers[0].resources.requets: unknown field '
        '"spec.template.spec.containers[0].resources.requets" (did you mean "requests"?)',
    ),
    "replica": (
        DEPLOYMENT,
        "replicas: 3",
        "replica: 3",
        'in.yaml: Deployment "app": spec.replica: unknown field "spec.replica" (did you mean "replicas"?)',
    ),
}


@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_a_typo_is_an_error_with_a_did_you_mean_and_the_object_is_not_used(typo: str) -> None:
    text, right, wrong, expected = TYPOS[typo]
    assert right in text
    assert parse_manifests(text, "in.yaml").errors == []
    result = parse_manifests(text.replace(right, wrong), "in.yaml")
    assert result.errors == [expected]
    assert result.objects == []


def test_every_unknown_field_of_an_object_is_a_line_and_other_objects_are_kept() -> None:
    broken = (
        nodepool().replace("requirements:", "requirments:").replace("WhenEmpty", "WhenEmpty\n    budgts: []")
    )
    result = parse_manifests(f"{broken}---\n{DEPLOYMENT}", "in.yaml")
    assert [error.split(": ", 2)[2] for error in result.errors] == [
        'spec.template.spec.requirments: unknown field "spec.template.spec.requirments" '
        '(did you mean "requirements"?)',
        'spec.disruption.budgts: unknown field "spec.disruption.budgts" (did you mean "budgets"?)',
    ]
    assert [loaded.kind for loaded in result.objects] == ["Deployment"]


def test_a_name_close_to_nothing_or_to_two_names_gets_no_guess() -> None:
    text = DEPLOYMENT.replace("replicas: 3", "replicas: 3\n  colour: blue")
    assert errors_of(text) == ['in.yaml: Deployment "app": spec.colour: unknown field "spec.colour"']
    assert did_you_mean("nam", {"name", "names"}) == ""
    assert did_you_mean("nmae", {"name", "namespace"}) == ' (did you mean "name"?)'


def test_v1beta1_nodepool_fields_are_accepted_in_v1beta1_and_refused_in_v1() -> None:
    kubelet = "      kubelet: {maxPods: 20, evictionHard: {memory.available: 5%}}\n"
    kubelet += "      resources: {requests: {cpu: 1}}"
    v1beta1 = nodepool("v1beta1", kubelet, "    expireAfter: 720h", V1BETA1_REF)
    result = parse_manifests(v1beta1, "in.yaml")
    assert result.errors == []
    assert [loaded.kind for loaded in result.objects] == ["NodePool"]

    v1 = nodepool("v1", kubelet, "    expireAfter: 720h", V1BETA1_REF.replace("apiVersion", "version"))
    assert [error.split(": ", 2)[2] for error in errors_of(v1)] == [
        'spec.template.spec.nodeClassRef.version: unknown field "spec.template.spec.nodeClassRef.version"',
        'spec.template.spec.kubelet: unknown field "spec.template.spec.kubelet"',
        'spec.template.spec.resources: unknown field "spec.template.spec.resources"',
        'spec.disruption.expireAfter: unknown field "spec.disruption.expireAfter"',
    ]
    v1_fields = nodepool("v1", "      expireAfter: Never\n      terminationGracePeriod: 1h")
    assert errors_of(v1_fields) == []
    assert [error.split(": ", 2)[2] for error in errors_of(v1_fields.replace("/v1\n", "/v1beta1\n", 1))] == [
        'spec.template.spec.nodeClassRef.group: unknown field "spec.template.spec.nodeClassRef.group"',
        'spec.template.spec.expireAfter: unknown field "spec.template.spec.expireAfter"',
        "spec.template.spec.terminationGracePeriod: unknown field "
        '"spec.template.spec.terminationGracePeriod"',
    ]


EC2NODECLASS = """\
apiVersion: karpenter.k8s.aws/{version}
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiFamily: AL2023
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  blockDeviceMappings: [{{deviceName: /dev/xvda, ebs: {{volumeSize: 100Gi, volumeType: gp3}}}}]
  metadataOptions: {{httpTokens: required}}
{extra}
"""


def test_ec2nodeclass_fields_per_version() -> None:
    v1 = EC2NODECLASS.format(
        version="v1", extra="  amiSelectorTerms: [{alias: al2023@latest}]\n  kubelet: {maxPods: 110}"
    )
    assert errors_of(v1) == []
    v1beta1 = EC2NODECLASS.format(version="v1beta1", extra="  amiSelectorTerms: [{alias: al2023@latest}]")
    assert [error.split(": ", 2)[2] for error in errors_of(v1beta1)] == [
        'spec.amiSelectorTerms[0].alias: unknown field "spec.amiSelectorTerms[0].alias"'
    ]
    assert errors_of(EC2NODECLASS.format(version="v1beta1", extra="  userData: echo")) == []
    misspelt = EC2NODECLASS.format(version="v1", extra="  amiSelectorTerms: [{alias: al2023@latest}]")
    misspelt = misspelt.replace("subnetSelectorTerms", "subnetSelectorTerm")
    assert [error.split(": ", 2)[2] for error in errors_of(misspelt)] == [
        'spec.subnetSelectorTerm: unknown field "spec.subnetSelectorTerm" '
        '(did you mean "subnetSelectorTerms"?)'
    ]


@pytest.mark.parametrize(
    ("written", "field", "meant"),
    [
        # "maxPod" kept silently would leave the nodes at the default max pods.
        ("kubelet: {maxPod: 20, cpuCFSQuota: true}", "spec.kubelet.maxPod", "maxPods"),
        ("metadataOptions: {httpToken: required}", "spec.metadataOptions.httpToken", "httpTokens"),
    ],
)
def test_a_misspelt_kubelet_or_metadata_setting_of_an_ec2nodeclass_is_an_error(
    written: str, field: str, meant: str
) -> None:
    # Both blocks are Karpenter's fixed sets of fields, not free-form.
    v1 = EC2NODECLASS.format(
        version="v1", extra=f"  amiSelectorTerms: [{{alias: al2023@latest}}]\n  {written}"
    )
    # The block written replaces the class's own, not a second key of the same name.
    block = written.split(":", 1)[0]
    v1 = "".join(
        line for line in v1.splitlines(keepends=True) if line != f"  {block}: {{httpTokens: required}}\n"
    )
    assert [error.split(": ", 2)[2] for error in errors_of(v1)] == [
        f'{field}: unknown field "{field}" (did you mean "{meant}"?)'
    ]


def test_subnets_are_selected_by_tags_or_id_only() -> None:
    # Karpenter's subnet terms have no name (security group and AMI terms do).
    v1 = EC2NODECLASS.format(version="v1", extra="  amiSelectorTerms: [{name: my-ami}]")
    by_name = v1.replace("subnetSelectorTerms: [", "subnetSelectorTerms: [{name: private}, ", 1)
    assert "subnetSelectorTerms: [{name: private}, " in by_name
    assert [error.split(": ", 2)[2] for error in errors_of(by_name)] == [
        'spec.subnetSelectorTerms[0].name: unknown field "spec.subnetSelectorTerms[0].name"'
    ]


def _static_pool(spec_lines: str) -> str:
    pool = NODEPOOL.format(version="v1", node_class_ref=V1_REF, template_spec="", disruption="")
    return pool.replace("  limits: {cpu: 100}\n", "").replace(
        "spec:\n  template:", f"spec:\n{spec_lines}  template:", 1
    )


def test_a_static_nodepools_replicas_is_read_with_karpenters_rules() -> None:
    assert errors_of(_static_pool("  replicas: 3\n  limits: {nodes: 5}\n")) == []
    assert [
        error.split(": ", 2)[2] for error in errors_of(_static_pool("  replicas: 3\n  limits: {cpu: 5}\n"))
    ] == ["spec.limits: only 'limits.nodes' is supported on static NodePools"]
    assert [
        error.split(": ", 2)[2] for error in errors_of(_static_pool("  replicas: 3\n  weight: 10\n"))
    ] == ["spec.weight: 'weight' is not supported on static NodePools"]
    assert [error.split(": ", 2)[2] for error in errors_of(_static_pool("  replicas: -1\n"))] == [
        "spec.replicas: must be greater than or equal to 0, got -1"
    ]


def test_a_karpenter_field_karpy_does_not_implement_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        fields.UNSUPPORTED_FIELDS,
        ("karpenter.sh/v1", "NodePool", "spec.template.spec.nope"),
        "nope is not done",
    )
    pool = NODEPOOL.format(
        version="v1", node_class_ref=V1_REF, template_spec="      nope: 1\n", disruption=""
    )
    assert [error.split(": ", 2)[2] for error in errors_of(pool)] == [
        "spec.template.spec.nope: nope is not done; remove it"
    ]


def test_a_kwoknodeclass_takes_karpenters_one_field() -> None:
    kwok = "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: k}\n"
    assert errors_of(kwok + "spec: {nodeRegistrationDelay: 30s}\n") == []
    assert errors_of(kwok + "spec: {nodeRegistrationDelai: 30s}\n") == [
        'in.yaml: KWOKNodeClass "k": spec.nodeRegistrationDelai: unknown field "spec.nodeRegistrationDelai" '
        '(did you mean "nodeRegistrationDelay"?)'
    ]


@pytest.mark.parametrize("name", ["cpu", "memory", "ephemeral-storage", "pods", "nodes", "hugepages-2Mi"])
def test_standard_resource_names_are_accepted(name: str) -> None:
    assert resource_name_error(name, f"spec.limits.{name}") is None


@pytest.mark.parametrize("name", ["nvidia.com/gpu", "example.com/foo", "aws.amazon.com/neuron"])
def test_extended_resource_names_are_accepted(name: str) -> None:
    assert resource_name_error(name, f"spec.limits.{name}") is None
    assert errors_of(nodepool().replace("{cpu: 100}", f"{{cpu: 100, {name}: 2}}")) == []


def test_an_unqualified_unknown_resource_name_is_an_error_in_a_container_too() -> None:
    text = DEPLOYMENT.replace("{cpu: 500m, memory: 1Gi}", "{cpu: 500m, memory: 1Gi, gpu: 1}")
    assert errors_of(text) == [
        'in.yaml: Deployment "app": spec.template.spec.containers[0].resources.requests.gpu: unknown '
        'resource name "gpu": must be a standard resource (cpu, ephemeral-storage, memory, nodes, pods, '
        "storage, hugepages-<size>) or fully qualified (example.com/name)"
    ]


REAL_WORLD_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
  labels: {app: web, tier: frontend}
  annotations: {prometheus.io/scrape: "true"}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: 5a1f-77, controller: true}]
  finalizers: [example.com/cleanup]
  generateName: web-
spec:
  serviceAccountName: web
  automountServiceAccountToken: false
  priorityClassName: high
  terminationGracePeriodSeconds: 60
  dnsPolicy: ClusterFirst
  restartPolicy: Always
  hostname: web
  enableServiceLinks: false
  imagePullSecrets: [{name: registry}]
  securityContext:
    {runAsNonRoot: true, runAsUser: 1000, fsGroup: 2000, seccompProfile: {type: RuntimeDefault}}
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: [{key: dedicated, operator: Equal, value: web, effect: NoExecute, tolerationSeconds: 30}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 10
          preference: {matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
      labelSelector: {matchLabels: {app: web}}
      matchLabelKeys: [pod-template-hash]
  runtimeClassName: kata
  overhead: {cpu: 10m}
  initContainers:
    - name: migrate
      image: registry.invalid/web:1
      command: [/bin/migrate]
      restartPolicy: Always
      resources: {requests: {cpu: 100m}}
  containers:
    - name: web
      image: registry.invalid/web:1
      imagePullPolicy: IfNotPresent
      args: [--port=8080]
      workingDir: /app
      ports: [{name: http, containerPort: 8080, protocol: TCP, hostPort: 80}]
      env:
        - {name: MODE, value: production}
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: PASSWORD
          valueFrom: {secretKeyRef: {name: web, key: password, optional: false}}
        - name: CPU_LIMIT
          valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}
      envFrom: [{configMapRef: {name: web}}, {prefix: DB_, secretRef: {name: db}}]
      resources:
        requests: {cpu: 500m, memory: 512Mi, ephemeral-storage: 1Gi}
        limits: {memory: 1Gi, nvidia.com/gpu: 1, hugepages-2Mi: 64Mi}
      livenessProbe:
        httpGet: {path: /healthz, port: http, httpHeaders: [{name: X-Probe, value: "1"}]}
        initialDelaySeconds: 10
        periodSeconds: 5
        failureThreshold: 3
      readinessProbe: {tcpSocket: {port: 8080}, timeoutSeconds: 2}
      startupProbe: {exec: {command: [cat, /tmp/ready]}, successThreshold: 1}
      lifecycle:
        preStop: {exec: {command: [sleep, "5"]}}
        postStart: {httpGet: {path: /started, port: 8080}}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
      volumeMounts:
        - {name: data, mountPath: /data}
        - {name: config, mountPath: /etc/web, readOnly: true, subPath: web.conf}
      terminationMessagePolicy: FallbackToLogsOnError
      stdin: false
      tty: false
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: web-data}
    - name: config
      configMap: {name: web, items: [{key: web.conf, path: web.conf}], defaultMode: 420}
    - name: cache
      emptyDir: {medium: Memory, sizeLimit: 256Mi}
    - name: token
      projected: {sources: [{serviceAccountToken: {path: token, expirationSeconds: 3600, audience: api}}]}
    - name: scratch
      ephemeral:
        volumeClaimTemplate:
          metadata: {labels: {app: web}}
          spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
status:
  phase: Running
  podIP: 10.0.0.7
  conditions: [{type: Ready, status: "True", lastTransitionTime: "2024-05-01T10:00:00Z"}]
  anythingAtAll: {pasted: from kubectl}
"""


def test_a_pod_with_many_real_world_fields_is_accepted() -> None:
    result = parse_manifests(REAL_WORLD_POD, "pod.yaml")
    assert result.errors == []
    assert [loaded.kind for loaded in result.objects] == ["Pod"]
    with_typo = REAL_WORLD_POD.replace("livenessProbe:", "livenesProbe:")
    assert parse_manifests(with_typo, "pod.yaml").errors == [
        'pod.yaml: Pod "web": spec.containers[0].livenesProbe: unknown field '
        '"spec.containers[0].livenesProbe" (did you mean "livenessProbe"?)'
    ]


def test_metadata_is_an_object_meta_in_every_kind() -> None:
    for text, kind in ((nodepool(), "NodePool"), (DEPLOYMENT, "Deployment")):
        misspelt = text.replace("metadata: {name:", "metadata: {lables: {a: b}, name:", 1)
        assert [error.split(": ", 2)[2] for error in errors_of(misspelt)] == [
            'metadata.lables: unknown field "metadata.lables" (did you mean "labels"?)'
        ], kind
    assert list(check({"name": "x", "labels": {"any/key": "v"}, "uid": "1"}, OBJECT_META, "metadata")) == []


def test_the_bundled_kubernetes_fields_load_and_every_kind_read_from_files_has_a_tree() -> None:
    bundled = kube_fields()
    assert re.fullmatch(r"v1\.\d+\.\d+", bundled["kubernetesVersion"])
    assert {tuple(key.rsplit("/", 1)) for key in bundled["kinds"]} == set(KINDS)
    assert set(PARSERS) <= set(kind_trees())
    assert (REPO / "src/karpy/api/data/kube-fields.json").stat().st_size < 64 * 1024


def test_kinds_with_a_tree_are_checked_whether_or_not_they_have_a_parser_yet() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"paralelism": 2, "template": {"spec": {"containers": [{"name": "x"}]}}},
    }
    assert [str(error) for error in unknown_fields(job, "batch/v1", "Job")] == [
        'spec.paralelism: unknown field "spec.paralelism" (did you mean "parallelism"?)'
    ]
    assert unknown_fields({"spec": {"anything": 1}}, "example.com/v1", "Widget") == []


def _manifest_files() -> list[Path]:
    roots = [REPO / "tests" / "data", REPO / "src" / "karpy" / "sim" / "scenarios"]
    return sorted(path for root in roots for path in root.rglob("*.y*ml"))


def _documents(text: str) -> list[object]:
    return [document for document in yaml.load_all(text, Loader=KubernetesYAMLLoader) if document]


def _doc_examples() -> list[tuple[str, str]]:
    examples = []
    for markdown in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```ya?ml\n(.*?)```", markdown.read_text(encoding="utf-8"), re.DOTALL):
            examples.append((markdown.name, block))
    return examples


def test_every_bundled_and_documented_manifest_has_only_known_fields() -> None:
    checked = 0
    for source, text in [(str(path), path.read_text(encoding="utf-8")) for path in _manifest_files()] + [
        *_doc_examples()
    ]:
        for document in _documents(text):
            if not isinstance(document, dict) or document.get("kind") == "Scenario":
                continue
            items = document["items"] if document.get("kind") == "List" else [document]
            for item in items:
                assert unknown_fields(item, str(item.get("apiVersion")), str(item.get("kind"))) == [], source
                checked += 1
    assert checked > 30


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


def test_the_generator_keeps_field_names_only_and_leaves_out_plain_values_and_status() -> None:
    meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    quantity = "io.k8s.apimachinery.pkg.api.resource.Quantity"
    kinds = {
        f"io.k8s.api.test.{kind}": {
            "description": "dropped",
            "x-kubernetes-group-version-kind": [
                {
                    "group": api_version.rpartition("/")[0],
                    "version": api_version.rpartition("/")[2],
                    "kind": kind,
                }
            ],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": _ref(meta),
                "spec": _ref("io.k8s.api.test.Spec"),
                "status": _ref("io.k8s.api.test.Status"),
            },
            "type": "object",
        }
        for api_version, kind in KINDS
    }
    document = {
        "definitions": {
            **kinds,
            meta: {
                "properties": {
                    "name": {"type": "string"},
                    "labels": {"additionalProperties": {"type": "string"}},
                }
            },
            "io.k8s.api.test.Spec": {
                "properties": {
                    "replicas": {"type": "integer", "description": "dropped"},
                    "requests": {
                        "additionalProperties": _ref("io.k8s.apimachinery.pkg.api.resource.Quantity")
                    },
                    "items": {"type": "array", "items": _ref("io.k8s.api.test.Item")},
                    "extension": _ref("io.k8s.apimachinery.pkg.runtime.RawExtension"),
                    "since": _ref("io.k8s.apimachinery.pkg.apis.meta.v1.Time"),
                }
            },
            "io.k8s.api.test.Item": {"properties": {"name": {"type": "string"}}},
            "io.k8s.api.test.Status": {"properties": {"phase": {"type": "string"}}},
            quantity: {"type": "string"},
            "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object"},
            "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
        }
    }
    content = field_trees(document, "v1.99.0")
    assert content["kubernetesVersion"] == "v1.99.0"
    assert content["kinds"]["apps/v1/Deployment"] == {
        "apiVersion": 0,
        "kind": 0,
        "metadata": "@meta.v1.ObjectMeta",
        "spec": "@test.Spec",
        "status": 0,
    }
    assert content["definitions"] == {
        "meta.v1.ObjectMeta": {"labels": {"*": 0}, "name": 0},
        "test.Item": {"name": 0},
        "test.Spec": {
            "extension": 0,
            "items": ["@test.Item"],
            "replicas": 0,
            "requests": "resources",
            "since": 0,
        },
    }
    assert json.loads(render(content)) == content


@pytest.mark.parametrize(
    "field",
    ["placementGroupSelector", "connectionTracking", "networkInterfaces", "ipPrefixCount", "cpuOptions"],
)
def test_the_ec2nodeclass_launch_settings_karpy_lacks_are_refused_as_unsupported(field: str) -> None:
    node_class = (
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: a}\nspec:\n"
        "  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n"
        "  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n"
        f"  {field}: {{}}\n"
    )
    [error] = errors_of(node_class)
    assert error.endswith(
        f"spec.{field}: spec.{field} ({error.split('(', 1)[1].split(')')[0]}) "
        "is not supported by karpy; remove it"
    )
