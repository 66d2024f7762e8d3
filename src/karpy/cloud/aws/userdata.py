"""The UserData of a NodeClaim's launch template, by AMI family, as Karpenter builds it.

An instance joins the cluster by what its user data tells the AMI's bootstrap
to do. Karpenter's AWS provider writes that document from the cluster's
connection details, the NodeClaim's labels and taints and the kubelet's
``maxPods``, and merges in the ``userData`` the EC2NodeClass carries. This
module does the same, purely (strings in, a string out: no I/O), so the
launcher only has to base64-encode the result into the launch template.

Per family (``EC2NodeClass.effective_ami_family``):

- **AL2023** (nodeadm): a MIME multi-part document (boundary ``//``) whose
  first part is karpy's ``NodeConfig`` (``node.eks.aws/v1alpha1``: cluster
  name, ``apiServerEndpoint``, ``certificateAuthority``, ``cidr``; kubelet
  ``config`` with the class' kubelet settings under the kubelet's own names
  and ``registerWithTaints``; the ``--node-labels`` flag; ``instance.
  localStorage.strategy: RAID0`` for that instance store policy), followed by
  the user's parts. A user's MIME
  document contributes its parts as they are; anything else becomes one part,
  a ``NodeConfig`` if it parses as a YAML mapping and a shell script
  otherwise. This is Karpenter's order: nodeadm merges every ``NodeConfig``
  part it finds, so a user's part can add kubelet settings to karpy's.
- **AL2** (``/etc/eks/bootstrap.sh``): a MIME document with the user's parts
  first (a non-MIME ``userData`` is one shell-script part) and then karpy's
  shell part, which runs ``bootstrap.sh <cluster> --apiserver-endpoint ...
  --b64-cluster-ca ...`` with ``--kubelet-extra-args`` carrying
  ``--node-labels``, ``--register-with-taints`` and the kubelet settings'
  flags (``--dns-cluster-ip``, with ``--ip-family ipv6`` for an IPv6 address,
  and ``--local-disks raid0`` are bootstrap.sh's own options). The
  user's script runs first, so it can prepare the machine before the kubelet
  starts, as Karpenter documents.
- **Bottlerocket**: TOML. The user's settings are kept; karpy sets
  ``settings.kubernetes`` ``cluster-name``, ``api-server``,
  ``cluster-certificate``, ``cluster-dns-ip``, ``max-pods`` (when known) and
  the kubelet settings Bottlerocket has (all but ``podsPerCore``; the image GC
  thresholds as strings), adds for RAID0 a ``bootstrap-commands`` entry that
  makes the instance store the ephemeral storage,
  merges its labels over the user's ``node-labels`` (karpy's win on the same
  key) and replaces ``node-taints`` whole, as Karpenter does: the NodeClaim's
  taints are the ones the node must register with. ``settings.autoscaling.
  should-wait``, when the user set it, becomes false: these instances are in
  no Auto Scaling group, and waiting would hold the kubelet forever.
- **Custom**: the user's ``userData`` verbatim, byte for byte; karpy adds
  nothing, because it cannot know how the AMI bootstraps. The K3s recipe in
  ``docs/aws.md`` is such a class.
- Windows families are refused (:class:`UserDataError`): their PowerShell
  bootstrap is not built yet.

``maxPods`` is the caller's, else the class' ``kubelet.maxPods``; with
neither, the AMI's bootstrap computes it. Every other field of the class'
``kubelet`` is passed on as Karpenter passes it: ``kubeReserved``,
``systemReserved`` and ``evictionHard`` because karpy sizes the node's
allocatable with them (the kubelet must reserve the same, or pods karpy placed
on the node would not fit on it); ``clusterDNS`` (the first address for AL2 and
Bottlerocket, the list for AL2023; it wins over the cluster's), ``podsPerCore``,
``evictionSoft`` and its grace periods (in Go's duration form, ``1m30s``),
``evictionMaxPodGracePeriod``, the image GC thresholds and ``cpuCFSQuota``
because the node's kubelet is where they act. A Custom class cannot carry the
latter (:meth:`karpy.api.nodeclass.EC2NodeClass.parse` refuses them). The output is deterministic (labels
sorted, fixed boundary ``//`` unless a body line starts with ``--//``, when a
longer one is taken), so equal inputs give equal documents and a launch
template found by its content is found again.

Why it is safe:

- The ``karpenter.sh/unregistered:NoExecute`` taint is always among the taints
  a node registers with (added when the caller's taints lack it): the NodeClaim
  lifecycle removes it on registration, and until then no pod may run on a
  node karpy has not yet matched to its NodeClaim.
- Labels and taints (and the reservations' resource names, eviction signals
  and quantities) are checked against Kubernetes' syntax before they are
  written into a shell command line, a YAML flag or TOML: a value with a
  comma, quote or space could otherwise add labels or break out of the
  quoting. A bad one raises :class:`UserDataError`.
- Secrets are never copied into the document by karpy: it writes the cluster
  CA (public) and what the class and NodeClaim say. A secret a boot script
  needs (the K3s join token) is fetched by the script at boot (from SSM), so
  only its parameter name is in the user data.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from email.parser import Parser
from typing import Any

import yaml

from karpy.api.duration import DurationError, parse_duration
from karpy.api.nodeclass import (
    AMI_FAMILY_CUSTOM,
    EVICTION_SIGNALS,
    INSTANCE_STORE_RAID0,
    KUBELET_RESERVABLE,
    EC2NodeClass,
    KubeletConfiguration,
)
from karpy.api.quantity import Quantity, QuantityError, ResourceAmounts, format_amount
from karpy.api.taints import NO_EXECUTE, UNREGISTERED_TAINT_KEY, Taint

AMI_FAMILY_AL2 = "AL2"
AMI_FAMILY_AL2023 = "AL2023"
AMI_FAMILY_BOTTLEROCKET = "Bottlerocket"

MIME_BOUNDARY = "//"
CONTENT_TYPE_SHELL = 'text/x-shellscript; charset="us-ascii"'
CONTENT_TYPE_NODECONFIG = "application/node.eks.aws"
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
AL2_BOOTSTRAP = "/etc/eks/bootstrap.sh"

# Kubernetes' label syntax: an optional DNS-subdomain prefix and a name of at most 63
# characters from [A-Za-z0-9._-], starting and ending alphanumeric; values the same or empty.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")
_PERCENTAGE = re.compile(r"^[0-9]+(\.[0-9]+)?%$")
# TOML keys that need no quotes.
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class UserDataError(ValueError):
    """The user data cannot be built: an unsupported family, bad user data, or a bad label or taint."""


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """How a node reaches the cluster: what the bootstraps need besides the NodeClaim.

    ``ca_bundle`` is the cluster CA as base64-encoded PEM (``CLUSTER_CA_BUNDLE``,
    what ``aws eks describe-cluster`` calls ``certificateAuthority.data``);
    ``cidr`` the service CIDR nodeadm wants; ``dns_ip`` the cluster DNS
    service address, when the kubelet's default is not right.
    """

    name: str
    endpoint: str
    ca_bundle: str = ""
    cidr: str = ""
    dns_ip: str = ""


def user_data(
    node_class: EC2NodeClass,
    *,
    cluster: ClusterInfo,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    max_pods: int | None = None,
) -> str:
    """The launch template UserData (plain text) for a NodeClaim launched from ``node_class``.

    ``max_pods`` defaults to the class' ``kubelet.maxPods``; without either, the
    AMI's bootstrap computes it (from the ENI table on AL2 and AL2023).
    """
    return render_user_data(
        node_class.effective_ami_family,
        node_class.user_data,
        cluster=cluster,
        labels=labels,
        taints=taints,
        max_pods=max_pods if max_pods is not None else node_class.kubelet.max_pods,
        kubelet=node_class.kubelet,
        instance_store_policy=node_class.instance_store_policy,
    )


@dataclass(frozen=True, slots=True)
class NodeBootstrap:
    """What every family's bootstrap is told: the cluster, and the node's checked labels and taints."""

    cluster: ClusterInfo
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]  # including karpenter.sh/unregistered:NoExecute
    max_pods: int | None
    # The class' kubelet reservations and hard eviction thresholds, as quantity strings.
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    eviction_hard: Mapping[str, str] = field(default_factory=dict)
    # The class' other kubelet settings, checked; None or empty when unset.
    pods_per_core: int | None = None
    cluster_dns: tuple[str, ...] = ()
    eviction_soft: Mapping[str, str] = field(default_factory=dict)
    eviction_soft_grace_period: Mapping[str, str] = field(default_factory=dict)
    eviction_max_pod_grace_period: int | None = None
    image_gc_high_threshold_percent: int | None = None
    image_gc_low_threshold_percent: int | None = None
    cpu_cfs_quota: bool | None = None
    raid0: bool = False  # instanceStorePolicy RAID0: the instance store disks hold ephemeral storage

    @property
    def dns_ip(self) -> str:
        """The kubelet's cluster DNS address: the class' first ``clusterDNS``, else the cluster's."""
        return self.cluster_dns[0] if self.cluster_dns else self.cluster.dns_ip


def render_user_data(
    family: str,
    custom: str,
    *,
    cluster: ClusterInfo,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    max_pods: int | None = None,
    kubelet: KubeletConfiguration | None = None,
    instance_store_policy: str = "",
) -> str:
    """The UserData for AMI ``family`` with the class' own ``custom`` user data merged in."""
    if family == AMI_FAMILY_CUSTOM:
        return custom
    kubelet = kubelet or KubeletConfiguration()
    node = NodeBootstrap(
        cluster,
        _checked_labels(labels),
        _with_unregistered(taints),
        max_pods,
        kube_reserved=_reserved("kubeReserved", kubelet.kube_reserved),
        system_reserved=_reserved("systemReserved", kubelet.system_reserved),
        eviction_hard=_eviction_thresholds("evictionHard", kubelet.eviction_hard),
        pods_per_core=kubelet.pods_per_core,
        cluster_dns=_checked_addresses(kubelet.cluster_dns),
        eviction_soft=_eviction_thresholds("evictionSoft", kubelet.eviction_soft),
        eviction_soft_grace_period=_grace_periods(kubelet.eviction_soft_grace_period),
        eviction_max_pod_grace_period=kubelet.eviction_max_pod_grace_period,
        image_gc_high_threshold_percent=kubelet.image_gc_high_threshold_percent,
        image_gc_low_threshold_percent=kubelet.image_gc_low_threshold_percent,
        cpu_cfs_quota=kubelet.cpu_cfs_quota,
        raid0=instance_store_policy == INSTANCE_STORE_RAID0,
    )
    if family == AMI_FAMILY_AL2023:
        return _al2023(custom, node)
    if family == AMI_FAMILY_AL2:
        return _al2(custom, node)
    if family == AMI_FAMILY_BOTTLEROCKET:
        return _bottlerocket(custom, node)
    raise UserDataError(f"karpy does not build user data for AMI family {family!r}")


# -- labels and taints ------------------------------------------------------


def _checked_labels(labels: Mapping[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise UserDataError(f"label key {key!r} is not a valid Kubernetes label key")
        if not _LABEL_VALUE.match(value):
            raise UserDataError(f"label {key}={value!r}: not a valid Kubernetes label value")
    return dict(sorted(labels.items()))


def _with_unregistered(taints: Sequence[Taint]) -> tuple[Taint, ...]:
    for taint in taints:
        if not _LABEL_KEY.match(taint.key):
            raise UserDataError(f"taint key {taint.key!r} is not a valid Kubernetes taint key")
        if not _LABEL_VALUE.match(taint.value):
            raise UserDataError(f"taint {taint.key}={taint.value!r}: not a valid Kubernetes taint value")
    unregistered = Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE)
    if any(taint.key == UNREGISTERED_TAINT_KEY and taint.effect == NO_EXECUTE for taint in taints):
        return tuple(taints)
    return (*taints, unregistered)


def _reserved(field_name: str, amounts: ResourceAmounts) -> dict[str, str]:
    for name in amounts:
        if name not in KUBELET_RESERVABLE:
            raise UserDataError(f"kubelet.{field_name}: the kubelet cannot reserve {name!r}")
    return {name: format_amount(name, amount) for name, amount in sorted(amounts.items())}


def _eviction_thresholds(field_name: str, thresholds: Mapping[str, str]) -> dict[str, str]:
    for signal, value in thresholds.items():
        if signal not in EVICTION_SIGNALS:
            raise UserDataError(f"kubelet.{field_name}: {signal!r} is not an eviction signal")
        if _PERCENTAGE.match(value):
            continue
        try:
            Quantity.parse(value)
        except QuantityError as error:
            raise UserDataError(f"kubelet.{field_name} {signal}: {error}") from error
    return dict(sorted(thresholds.items()))


def _grace_periods(periods: Mapping[str, str]) -> dict[str, str]:
    """Soft eviction grace periods in Go's canonical form (``90s`` is ``1m30s``), as Karpenter writes them."""
    checked = {}
    for signal, value in sorted(periods.items()):
        if signal not in EVICTION_SIGNALS:
            raise UserDataError(f"kubelet.evictionSoftGracePeriod: {signal!r} is not an eviction signal")
        try:
            checked[signal] = go_duration_string(parse_duration(value))
        except DurationError as error:
            raise UserDataError(f"kubelet.evictionSoftGracePeriod {signal}: {error}") from error
    return checked


def go_duration_string(seconds: float) -> str:
    """Go's ``time.Duration.String()`` of whole or fractional seconds: ``1h2m3s``, ``1m30s``, ``0s``."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    nanos = round(abs(seconds) * 1e9)
    hours, nanos = divmod(nanos, 3600 * 10**9)
    minutes, nanos = divmod(nanos, 60 * 10**9)
    whole, fraction = divmod(nanos, 10**9)
    text = f"{whole}.{fraction:09d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _checked_addresses(addresses: Sequence[str]) -> tuple[str, ...]:
    for address in addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError as error:
            raise UserDataError(f"kubelet.clusterDNS: {address!r} is not an IP address") from error
    return tuple(addresses)


def _is_ipv6(address: str) -> bool:
    return bool(address) and ipaddress.ip_address(address).version == 6


def _flag_map(flag: str, values: Mapping[str, str], separator: str) -> list[str]:
    """``--flag=k<sep>v,...`` when there are values (the kubelet's map flags), else nothing."""
    if not values:
        return []
    return [f"--{flag}=" + ",".join(f"{key}{separator}{value}" for key, value in values.items())]


def _node_labels_flag(labels: Mapping[str, str]) -> str:
    return "--node-labels=" + ",".join(f"{key}={value}" for key, value in labels.items())


def _register_with_taints_flag(taints: Sequence[Taint]) -> str:
    # The kubelet's form: key=value:Effect, with an empty value allowed.
    return "--register-with-taints=" + ",".join(f"{t.key}={t.value}:{t.effect}" for t in taints)


# -- MIME -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MimePart:
    """One part of a multi-part user data document: its headers (Content-Type first) and body."""

    headers: tuple[tuple[str, str], ...]
    body: str

    @classmethod
    def of(cls, content_type: str, body: str) -> MimePart:
        return cls((("Content-Type", content_type),), body)


def is_mime(text: str) -> bool:
    """Whether user data is a MIME document (how Karpenter tells: its first header)."""
    stripped = text.lstrip()
    return stripped.startswith("MIME-Version:") or stripped.startswith("Content-Type:")


def mime_parts(text: str) -> list[MimePart]:
    """The parts of a multi-part MIME document, headers and bodies as written."""
    message = Parser().parsestr(text)
    if not message.is_multipart():
        raise UserDataError(
            f"userData is MIME but not multipart (Content-Type {message.get_content_type()!r})"
        )
    parts: list[MimePart] = []
    payload = message.get_payload()
    if not isinstance(payload, list):
        raise UserDataError("userData is a MIME document without parts")
    for part in payload:
        if not isinstance(part, Message):
            raise UserDataError("userData holds a MIME part that cannot be read")
        if part.is_multipart():
            raise UserDataError("userData holds a nested multipart part; karpy merges flat documents only")
        body = part.get_payload()
        if not isinstance(body, str):
            raise UserDataError("userData holds a MIME part without a text body")
        parts.append(MimePart(tuple((name, str(value)) for name, value in part.items()), body))
    return parts


def _serialize_mime(parts: Sequence[MimePart]) -> str:
    boundary = MIME_BOUNDARY
    # A body line that starts with the delimiter would end its part early: pick another.
    while any(line.startswith(f"--{boundary}") for part in parts for line in part.body.splitlines()):
        boundary += "/"
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{boundary}"', ""]
    for part in parts:
        lines.append(f"--{boundary}")
        lines.extend(f"{name}: {value}" for name, value in part.headers)
        lines.append("")
        lines.append(part.body.rstrip("\n"))
    lines.append(f"--{boundary}--")
    return "\n".join(lines) + "\n"


def _is_yaml_mapping(text: str) -> bool:
    try:
        return isinstance(yaml.safe_load(text), dict)
    except yaml.YAMLError:
        return False


# -- AL2023 -----------------------------------------------------------------


def node_config(node: NodeBootstrap) -> dict[str, Any]:
    """karpy's nodeadm ``NodeConfig`` for a node with these labels and taints."""
    cluster_spec: dict[str, Any] = {"name": node.cluster.name, "apiServerEndpoint": node.cluster.endpoint}
    if node.cluster.ca_bundle:
        cluster_spec["certificateAuthority"] = node.cluster.ca_bundle
    if node.cluster.cidr:
        cluster_spec["cidr"] = node.cluster.cidr
    kubelet_config: dict[str, Any] = {}
    if node.max_pods is not None:
        kubelet_config["maxPods"] = node.max_pods
    if node.pods_per_core is not None:
        kubelet_config["podsPerCore"] = node.pods_per_core
    if node.cluster_dns:
        kubelet_config["clusterDNS"] = list(node.cluster_dns)
    elif node.cluster.dns_ip:
        kubelet_config["clusterDNS"] = [node.cluster.dns_ip]
    for key, values in (
        ("kubeReserved", node.kube_reserved),
        ("systemReserved", node.system_reserved),
        ("evictionHard", node.eviction_hard),
        ("evictionSoft", node.eviction_soft),
        ("evictionSoftGracePeriod", node.eviction_soft_grace_period),
    ):
        if values:
            kubelet_config[key] = dict(values)
    # The KubeletConfiguration's own names, as nodeadm merges them into the kubelet's config file.
    for key, value in (
        ("evictionMaxPodGracePeriod", node.eviction_max_pod_grace_period),
        ("imageGCHighThresholdPercent", node.image_gc_high_threshold_percent),
        ("imageGCLowThresholdPercent", node.image_gc_low_threshold_percent),
        ("cpuCFSQuota", node.cpu_cfs_quota),
    ):
        if value is not None:
            kubelet_config[key] = value
    kubelet_config["registerWithTaints"] = [taint.to_dict() for taint in node.taints]
    kubelet: dict[str, Any] = {"config": kubelet_config}
    if node.labels:
        kubelet["flags"] = [_node_labels_flag(node.labels)]
    spec: dict[str, Any] = {"cluster": cluster_spec, "kubelet": kubelet}
    if node.raid0:
        # nodeadm assembles the instance store disks into one RAID0 array for the kubelet and containerd.
        spec["instance"] = {"localStorage": {"strategy": INSTANCE_STORE_RAID0}}
    return {"apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig", "spec": spec}


def _al2023(custom: str, node: NodeBootstrap) -> str:
    config = "# karpy generated NodeConfig\n" + yaml.safe_dump(node_config(node), sort_keys=False)
    parts = [MimePart.of(CONTENT_TYPE_NODECONFIG, config)]
    if is_mime(custom):
        parts.extend(mime_parts(custom))
    elif custom.strip():
        content_type = CONTENT_TYPE_NODECONFIG if _is_yaml_mapping(custom) else CONTENT_TYPE_SHELL
        parts.append(MimePart.of(content_type, custom))
    return _serialize_mime(parts)


# -- AL2 --------------------------------------------------------------------


def bootstrap_script(node: NodeBootstrap) -> str:
    """The shell part that runs the EKS AL2 ``bootstrap.sh`` for this node."""
    # One option and its value a line; bootstrap.sh wants them apart, not joined by "=".
    command = [
        f"{AL2_BOOTSTRAP} {shlex.quote(node.cluster.name)}",
        f"--apiserver-endpoint {shlex.quote(node.cluster.endpoint)}",
    ]
    if node.cluster.ca_bundle:
        command.append(f"--b64-cluster-ca {shlex.quote(node.cluster.ca_bundle)}")
    if _is_ipv6(node.dns_ip):
        command.append("--ip-family ipv6")
    if node.dns_ip:
        command.append(f"--dns-cluster-ip {shlex.quote(node.dns_ip)}")
    kubelet_args = []
    if node.labels:
        kubelet_args.append(_node_labels_flag(node.labels))
    kubelet_args.append(_register_with_taints_flag(node.taints))
    if node.max_pods is not None:
        # bootstrap.sh would otherwise compute its own --max-pods from the ENI table.
        command.append("--use-max-pods false")
        kubelet_args.append(f"--max-pods={node.max_pods}")
    kubelet_args += _flag_map("kube-reserved", node.kube_reserved, "=")
    kubelet_args += _flag_map("system-reserved", node.system_reserved, "=")
    if node.pods_per_core is not None:
        kubelet_args.append(f"--pods-per-core={node.pods_per_core}")
    kubelet_args += _flag_map("eviction-hard", node.eviction_hard, "<")
    kubelet_args += _flag_map("eviction-soft", node.eviction_soft, "<")
    kubelet_args += _flag_map("eviction-soft-grace-period", node.eviction_soft_grace_period, "=")
    for flag, value in (
        ("eviction-max-pod-grace-period", node.eviction_max_pod_grace_period),
        ("image-gc-high-threshold", node.image_gc_high_threshold_percent),
        ("image-gc-low-threshold", node.image_gc_low_threshold_percent),
    ):
        if value is not None:
            kubelet_args.append(f"--{flag}={value}")
    if node.cpu_cfs_quota is not None:
        kubelet_args.append(f"--cpu-cfs-quota={str(node.cpu_cfs_quota).lower()}")
    command.append(f"--kubelet-extra-args {shlex.quote(' '.join(kubelet_args))}")
    if node.raid0:
        # bootstrap.sh assembles the instance store disks into one RAID0 array for the kubelet.
        command.append("--local-disks raid0")
    return "\n".join(
        [
            "#!/bin/bash -xe",
            "exec > >(tee /var/log/user-data.log | logger -t user-data -s 2>/dev/console) 2>&1",
            " \\\n  ".join(command),
            "",
        ]
    )


def _al2(custom: str, node: NodeBootstrap) -> str:
    parts: list[MimePart] = []
    if is_mime(custom):
        parts.extend(mime_parts(custom))
    elif custom.strip():
        parts.append(MimePart.of(CONTENT_TYPE_SHELL, custom))
    parts.append(MimePart.of(CONTENT_TYPE_SHELL, bootstrap_script(node)))
    return _serialize_mime(parts)


# -- Bottlerocket -----------------------------------------------------------


def _table(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise UserDataError(f"Bottlerocket userData: {where} must be a table")
    return value


def _bottlerocket(custom: str, node: NodeBootstrap) -> str:
    try:
        document: dict[str, Any] = tomllib.loads(custom)
    except tomllib.TOMLDecodeError as error:
        raise UserDataError(f"Bottlerocket userData is not valid TOML: {error}") from error
    settings = _table(document, "settings", "settings")
    kubernetes = _table(settings, "kubernetes", "settings.kubernetes")
    kubernetes["cluster-name"] = node.cluster.name
    kubernetes["api-server"] = node.cluster.endpoint
    if node.cluster.ca_bundle:
        kubernetes["cluster-certificate"] = node.cluster.ca_bundle
    if node.dns_ip:
        kubernetes["cluster-dns-ip"] = node.dns_ip
    if node.max_pods is not None:
        kubernetes["max-pods"] = node.max_pods
    for key, values in (
        ("kube-reserved", node.kube_reserved),
        ("system-reserved", node.system_reserved),
        ("eviction-hard", node.eviction_hard),
        ("eviction-soft", node.eviction_soft),
        ("eviction-soft-grace-period", node.eviction_soft_grace_period),
    ):
        if values:
            kubernetes[key] = dict(values)
    if node.eviction_max_pod_grace_period is not None:
        kubernetes["eviction-max-pod-grace-period"] = node.eviction_max_pod_grace_period
    # Bottlerocket takes the image GC thresholds as strings.
    for key, percent in (
        ("image-gc-high-threshold-percent", node.image_gc_high_threshold_percent),
        ("image-gc-low-threshold-percent", node.image_gc_low_threshold_percent),
    ):
        if percent is not None:
            kubernetes[key] = str(percent)
    if node.cpu_cfs_quota is not None:
        kubernetes["cpu-cfs-quota-enforced"] = node.cpu_cfs_quota
    if node.raid0:
        commands = _table(settings, "bootstrap-commands", "settings.bootstrap-commands")
        # Before the kubelet starts: the instance store disks as one array, bound where pods' data lives.
        commands["000-mount-instance-storage"] = {
            "commands": [
                ["apiclient", "ephemeral-storage", "init"],
                [
                    "apiclient",
                    "ephemeral-storage",
                    "bind",
                    "--dirs",
                    "/var/lib/containerd",
                    "/var/lib/kubelet",
                    "/var/log/pods",
                ],
            ],
            "mode": "always",
            "essential": True,
        }
    node_labels = _table(kubernetes, "node-labels", "settings.kubernetes.node-labels")
    node_labels.update(node.labels)
    node_taints: dict[str, list[str]] = {}
    for taint in node.taints:
        node_taints.setdefault(taint.key, []).append(f"{taint.value}:{taint.effect}")
    kubernetes["node-taints"] = node_taints
    autoscaling = settings.get("autoscaling")
    if isinstance(autoscaling, dict) and "should-wait" in autoscaling:
        autoscaling["should-wait"] = False
    return toml_document(document)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_string(text: str) -> str:
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped too.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # Python's forms of inf and nan are TOML's too
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    # Dates and times (tomllib reads them as datetime objects): their ISO form is TOML's.
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return str(isoformat())
    raise UserDataError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def toml_document(document: Mapping[str, Any]) -> str:
    """``document`` (as ``tomllib`` reads TOML) written back as TOML: tables as ``[headers]``."""
    lines: list[str] = []

    def write_table(table: Mapping[str, Any], path: tuple[str, ...], array: bool) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
        has_subtables = any(isinstance(v, dict) or _is_table_array(v) for v in table.values())
        if path and (scalars or not has_subtables):
            header = ".".join(_toml_key(part) for part in path)
            if lines:
                lines.append("")
            lines.append(f"[[{header}]]" if array else f"[{header}]")
        lines.extend(f"{_toml_key(key)} = {_toml_value(value)}" for key, value in scalars.items())
        for key, value in table.items():
            if isinstance(value, dict):
                write_table(value, (*path, key), array=False)
            elif _is_table_array(value):
                for item in value:
                    write_table(item, (*path, key), array=True)

    write_table(document, (), array=False)
    return "\n".join(lines) + "\n"
