"""Kubernetes objects the API server refuses, each with the words it refuses them with.

Shared by the unit test (karpy refuses each, with those words) and the
integration test (a real kube-apiserver refuses each, with the same words,
and accepts every base object), so that karpy's validation and the API
server's cannot drift apart.

Each case is a complete manifest: a valid base object with one thing wrong.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RefusedCase:
    id: str
    manifest: str
    words: str  # what both karpy's error and the API server's answer contain


def deployment(
    *,
    name: str = "web",
    replicas: str = "1",
    selector: str = "selector: {matchLabels: {app: web}}",
    labels: str = "{app: web}",
    spec: str = "",
    containers: str = "[{name: c, image: registry.invalid/web:1, resources: {requests: {cpu: 100m}}}]",
    kind: str = "Deployment",
) -> str:
    return f"""\
apiVersion: apps/v1
kind: {kind}
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  {selector}
  template:
    metadata: {{labels: {labels}}}
    spec:
      {spec or "schedulerName: default-scheduler"}
      containers: {containers}
"""


def daemonset(*, selector: str = "selector: {matchLabels: {app: web}}", spec: str = "") -> str:
    return deployment(selector=selector, spec=spec, kind="DaemonSet").replace("  replicas: 1\n", "")


def pod(*, metadata: str = "", spec: str = "", containers: str = "") -> str:
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: default{", " + metadata if metadata else ""}}}
spec:
  {spec or "schedulerName: default-scheduler"}
  containers: {containers or "[{name: c, image: registry.invalid/web:1}]"}
"""


def job(*, restart_policy: str = "Never", spec: str = "") -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: batch, namespace: default}}
spec:
  {spec or "backoffLimit: 1"}
  template:
    spec:
      restartPolicy: {restart_policy}
      containers: [{{name: c, image: registry.invalid/batch:1}}]
"""


def disruption_budget(spec: str = "minAvailable: 1") -> str:
    return (
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\n"
        f"spec: {{{spec}, selector: {{matchLabels: {{app: web}}}}}}\n"
    )


def priority_class(*, name: str = "batch", value: str = "100") -> str:
    return (
        f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\n"
    )


def with_container(resources: str = "", extra: str = "") -> str:
    fields = ", ".join(
        part
        for part in ("name: c, image: registry.invalid/web:1", resources and f"resources: {resources}", extra)
        if part
    )
    return f"[{{{fields}}}]"


TEMPLATE = "spec.template.spec"
BASES = (
    deployment(),
    daemonset(),
    pod(),
    job(),
    deployment(kind="ReplicaSet"),
    disruption_budget(),
    priority_class(),
)

CASES = (
    # Containers.
    RefusedCase(
        "duplicate container names",
        deployment(containers="[{name: c, image: a}, {name: c, image: b}]"),
        f'{TEMPLATE}.containers[1].name: Duplicate value: "c"',
    ),
    RefusedCase(
        "an init container named as a container",
        deployment(spec="initContainers: [{name: c, image: a}]", containers="[{name: c, image: b}]"),
        f'{TEMPLATE}.initContainers[0].name: Duplicate value: "c"',
    ),
    RefusedCase(
        "a container without a name",
        deployment(containers="[{image: a}]"),
        f"{TEMPLATE}.containers[0].name: Required value",
    ),
    RefusedCase(
        "a container name that is not a DNS-1123 label",
        pod(containers="[{name: Web_1, image: a}]"),
        'spec.containers[0].name: Invalid value: "Web_1": a lowercase RFC 1123 label must consist of',
    ),
    RefusedCase("no containers", deployment(containers="[]"), f"{TEMPLATE}.containers: Required value"),
    # Resources.
    RefusedCase(
        "a cpu request above its limit",
        deployment(containers=with_container("{requests: {cpu: '2'}, limits: {cpu: '1'}}")),
        f'{TEMPLATE}.containers[0].resources.requests: Invalid value: "2": must be less than or equal to '
        "cpu limit of 1",
    ),
    RefusedCase(
        "a memory request above its limit, written differently",
        pod(containers=with_container("{requests: {memory: 1.5Gi}, limits: {memory: 1Gi}}")),
        'spec.containers[0].resources.requests: Invalid value: "1536Mi": '
        "must be less than or equal to memory limit of 1Gi",
    ),
    RefusedCase(
        "an init container's request above its limit",
        pod(
            spec="initContainers: [{name: init, image: a, "
            "resources: {requests: {cpu: 500m}, limits: {cpu: 250m}}}]"
        ),
        'spec.initContainers[0].resources.requests: Invalid value: "500m": '
        "must be less than or equal to cpu limit of 250m",
    ),
    RefusedCase(
        "hugepages without a limit",
        pod(containers=with_container("{requests: {hugepages-2Mi: 2Mi, memory: 1Mi}}")),
        "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable "
        "resources",
    ),
    RefusedCase(
        "hugepages without cpu or memory",
        pod(containers=with_container("{requests: {hugepages-2Mi: 2Mi}, limits: {hugepages-2Mi: 2Mi}}")),
        "spec.containers[0].resources: Forbidden: HugePages require cpu or memory",
    ),
    RefusedCase(
        "a fractional extended resource",
        pod(
            containers=with_container("{requests: {example.com/foo: 500m}, limits: {example.com/foo: 500m}}")
        ),
        'spec.containers[0].resources.requests[example.com/foo]: Invalid value: "500m": must be an integer',
    ),
    RefusedCase(
        "an extended resource whose request is not its limit",
        pod(containers=with_container("{requests: {example.com/foo: 1}, limits: {example.com/foo: 2}}")),
        'spec.containers[0].resources.requests: Invalid value: "1": must be equal to example.com/foo '
        "limit of 2",
    ),
    RefusedCase(
        "an extended resource without a limit",
        deployment(containers=with_container("{requests: {nvidia.com/gpu: 1}}")),
        f"{TEMPLATE}.containers[0].resources.limits: Required value: Limit must be set for non "
        "overcommitable",
    ),
    RefusedCase(
        "a quantity that is not a quantity",
        deployment(containers=with_container("{requests: {cpu: 1x}}")),
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    ),
    RefusedCase(
        "a pod-level request that is not a quantity",
        pod(spec="resources: {limits: {memory: lots}}"),
        "quantities must match the regular expression",
    ),
    RefusedCase(
        "hugepages that are not a multiple of the page size",
        pod(
            containers=with_container(
                "{requests: {memory: 1Mi, hugepages-2Mi: 1Mi}, limits: {memory: 1Mi, hugepages-2Mi: 1Mi}}"
            )
        ),
        'spec.containers[0].resources.limits[hugepages-2Mi]: Invalid value: "1Mi": '
        "1Mi is not positive integer multiple of hugepages-2Mi",
    ),
    RefusedCase(
        "a pod's negative limit, which is its request too",
        pod(containers=with_container("{limits: {cpu: '-1'}}")),
        'spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0',
    ),
    RefusedCase(
        "a negative request",
        pod(containers=with_container("{requests: {cpu: '-1'}}")),
        'spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0',
    ),
    RefusedCase(
        "overhead without a RuntimeClass",
        pod(spec="overhead: {cpu: 100m}"),
        'pods "p" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined '
        "Overhead",
    ),
    # Workloads.
    RefusedCase(
        "a Deployment whose pods do not restart",
        deployment(spec="restartPolicy: Never"),
        f'{TEMPLATE}.restartPolicy: Unsupported value: "Never": supported values: "Always"',
    ),
    RefusedCase(
        "a DaemonSet whose pods restart on failure only",
        daemonset(spec="restartPolicy: OnFailure"),
        f'{TEMPLATE}.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"',
    ),
    RefusedCase("a Deployment without a selector", deployment(selector=""), "spec.selector: Required value"),
    RefusedCase(
        "a DaemonSet without a selector",
        daemonset(selector=""),
        'spec.template.metadata.labels: Invalid value: {"app":"web"}: `selector` does not match template '
        "`labels`",
    ),
    RefusedCase(
        "a selector that does not select the template's pods",
        deployment(selector="selector: {matchLabels: {app: other}}"),
        'spec.template.metadata.labels: Invalid value: {"app":"web"}: `selector` does not match template '
        "`labels`",
    ),
    RefusedCase(
        "an empty selector",
        deployment(selector="selector: {}"),
        "spec.selector: Invalid value: {}: empty selector is invalid for deployment",
    ),
    RefusedCase(
        "negative replicas",
        deployment(replicas="-1"),
        "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
    ),
    RefusedCase(
        "fractional replicas",
        deployment(replicas="1.5"),
        "json: cannot unmarshal number 1.5 into Go struct field DeploymentSpec.spec.replicas of type int32",
    ),
    RefusedCase(
        "a Job whose pods always restart",
        job(restart_policy="Always"),
        f'{TEMPLATE}.restartPolicy: Required value: valid values: "OnFailure", "Never"',
    ),
    RefusedCase(
        "a Job with a negative parallelism",
        job(spec="parallelism: -1"),
        "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
    ),
    RefusedCase(
        "a CronJob's Job with a negative parallelism",
        """\
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: default}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      parallelism: -1
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: c, image: registry.invalid/batch:1}]
""",
        "spec.jobTemplate.spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
    ),
    RefusedCase(
        "a disruption budget below zero",
        disruption_budget("minAvailable: -1"),
        "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0",
    ),
    RefusedCase(
        "a disruption budget above 100%",
        disruption_budget("maxUnavailable: '200%'"),
        'spec.maxUnavailable: Invalid value: "200%": must not be greater than 100%',
    ),
    RefusedCase(
        "a PriorityClass above a user's highest value",
        priority_class(value="2000000000"),
        "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
    ),
    RefusedCase(
        "a PriorityClass named as a system one",
        priority_class(name="system-batch"),
        "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use",
    ),
    # Scheduling.
    RefusedCase(
        "an Exists toleration with a value",
        deployment(spec="tolerations: [{key: a, operator: Exists, value: b}]"),
        f'{TEMPLATE}.tolerations[0].operator: Invalid value: "b": value must be empty when `operator` '
        "is 'Exists'",
    ),
    RefusedCase(
        "an Equal toleration without a key",
        pod(spec="tolerations: [{operator: Equal, value: x}]"),
        'spec.tolerations[0].operator: Invalid value: "Equal": operator must be Exists when `key` is empty',
    ),
    RefusedCase(
        "tolerationSeconds on a NoSchedule toleration",
        pod(spec="tolerations: [{key: a, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}]"),
        "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when "
        "`tolerationSeconds` is set",
    ),
    RefusedCase(
        "an unknown toleration effect",
        pod(spec="tolerations: [{key: a, operator: Exists, effect: Sometimes}]"),
        'spec.tolerations[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", '
        '"PreferNoSchedule", "NoExecute"',
    ),
    RefusedCase(
        "minDomains with ScheduleAnyway",
        deployment(
            spec="topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
            "whenUnsatisfiable: ScheduleAnyway, minDomains: 2, labelSelector: {matchLabels: {app: web}}}]"
        ),
        f"{TEMPLATE}.topologySpreadConstraints[0].minDomains: Invalid value: 2: "
        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
    ),
    RefusedCase(
        "a maxSkew of zero",
        pod(
            spec="topologySpreadConstraints: "
            "[{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]"
        ),
        "spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero",
    ),
    RefusedCase(
        "two spread constraints on the same key and policy",
        pod(
            spec="topologySpreadConstraints: "
            "[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}, "
            "{maxSkew: 2, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]"
        ),
        "spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}: "
        'Duplicate value: "{zone, DoNotSchedule}"',
    ),
    RefusedCase(
        "a spread constraint without a topology key",
        pod(spec="topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]"),
        "spec.topologySpreadConstraints[0].topologyKey: Required value: can not be empty",
    ),
    RefusedCase(
        "an invalid annotation key in a template",
        deployment(labels="{app: web}, annotations: {'bad key': x}"),
        'spec.template.annotations: Invalid value: "bad key": name part must consist of',
    ),
    RefusedCase(
        "hostPort 70000",
        deployment(containers=with_container(extra="ports: [{containerPort: 80, hostPort: 70000}]")),
        f"{TEMPLATE}.containers[0].ports[0].hostPort: Invalid value: 70000: must be between 1 and 65535, "
        "inclusive",
    ),
    RefusedCase(
        "containerPort 0",
        pod(containers=with_container(extra="ports: [{containerPort: 0}]")),
        "spec.containers[0].ports[0].containerPort: Required value",
    ),
    RefusedCase(
        "a priority beyond int32",
        deployment(spec="priority: 3000000000"),
        "json: cannot unmarshal number 3000000000 into Go struct field "
        "PodSpec.spec.template.spec.priority of type int32",
    ),
    RefusedCase(
        "a nodeSelector key with a space",
        deployment(spec="nodeSelector: {'bad key': x}"),
        f'{TEMPLATE}.nodeSelector: Invalid value: "bad key": name part must consist of alphanumeric '
        "characters",
    ),
    RefusedCase(
        "a nodeSelector value that is a boolean",
        pod(spec="nodeSelector: {karpenter.sh/capacity-type: yes}"),
        "json: cannot unmarshal bool into Go struct field PodSpec.spec.nodeSelector of type string",
    ),
    RefusedCase(
        "a selector value that is a number",
        deployment(
            selector="selector: {matchLabels: {app: web}, "
            "matchExpressions: [{key: tier, operator: NotIn, values: [1]}]}"
        ),
        "json: cannot unmarshal number into Go struct field "
        "LabelSelectorRequirement.spec.selector.matchExpressions.values of type string",
    ),
    # Names and labels.
    RefusedCase(
        "a YAML 1.1 'on' label, a boolean to kubectl",
        deployment(labels="{app: web, monitoring: on}"),
        "json: cannot unmarshal bool into Go struct field ObjectMeta.spec.template.metadata.labels of "
        "type string",
    ),
    RefusedCase(
        "a 'y' label, a boolean to kubectl's YAML",
        pod(metadata="labels: {enabled: y}"),
        "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string",
    ),
    RefusedCase(
        "a label value that is a number",
        pod(metadata="labels: {version: 2}"),
        "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string",
    ),
    RefusedCase(
        "a null label key",
        pod(metadata="labels: {~: x}"),
        "error converting YAML to JSON: unsupported map key of type: ",
    ),
    RefusedCase(
        "a label value that is not a label value",
        pod(metadata="labels: {app: -web-}"),
        'metadata.labels: Invalid value: "-web-": a valid label must be an empty string or consist of',
    ),
    RefusedCase(
        "a label value of 64 characters",
        pod(metadata="labels: {app: " + "a" * 64 + "}"),
        f'metadata.labels: Invalid value: "{"a" * 64}": must be no more than 63 bytes',
    ),
    RefusedCase(
        "a label key whose prefix is not a DNS subdomain",
        deployment(labels="{app: web, Example.COM/team: a}"),
        'spec.template.labels: Invalid value: "Example.COM/team": prefix part a lowercase RFC 1123 '
        "subdomain must consist of",
    ),
    RefusedCase(
        "an annotation key with two slashes",
        pod(metadata="annotations: {a/b/c: x}"),
        'metadata.annotations: Invalid value: "a/b/c": a valid label key must consist of',
    ),
    RefusedCase(
        "a label key whose name part is 64 characters",
        pod(spec="nodeSelector: {" + "k" * 64 + ": x}"),
        f'spec.nodeSelector: Invalid value: "{"k" * 64}": name part must be no more than 63 bytes',
    ),
    RefusedCase(
        "an empty StatefulSet selector",
        deployment(kind="StatefulSet", selector="selector: {}"),
        "spec.selector: Invalid value: {}: empty selector is invalid for statefulset",
    ),
    RefusedCase(
        "a StatefulSet without a selector",
        deployment(kind="StatefulSet", selector=""),
        "spec.selector: Required value",
    ),
    RefusedCase(
        "an unknown restart policy",
        pod(spec="restartPolicy: Sometimes"),
        'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", '
        '"Never"',
    ),
    RefusedCase(
        "a name with capitals",
        deployment(name="Web"),
        'metadata.name: Invalid value: "Web": a lowercase RFC 1123 subdomain must consist of',
    ),
    RefusedCase(
        "a name of 254 characters",
        deployment(name="a" * 254),
        f'metadata.name: Invalid value: "{"a" * 254}": must be no more than 253 characters',
    ),
)
