"""The launch template UserData by AMI family, read back the way each AMI's bootstrap reads it.

Each result is parsed with the reader its consumer uses (the MIME parser for
AL2023 and AL2 documents, YAML for nodeadm's NodeConfig, TOML for
Bottlerocket), so a test fails when the document would not bootstrap the
node, not merely when its text changes.
"""

from __future__ import annotations

import dataclasses
import shlex
import tomllib
from email.message import Message
from email.parser import Parser
from typing import Any

import pytest
import yaml

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.nodeclass import AMI_FAMILY_CUSTOM, EC2NodeClass
from karpy.api.taints import NO_EXECUTE, NO_SCHEDULE, UNREGISTERED_TAINT_KEY, Taint
from karpy.cloud.aws.userdata import (
    AMI_FAMILY_AL2,
    AMI_FAMILY_AL2023,
    AMI_FAMILY_BOTTLEROCKET,
    CONTENT_TYPE_NODECONFIG,
    ClusterInfo,
    UserDataError,
    render_user_data,
    user_data,
)

CLUSTER = ClusterInfo(
    name="my-k3s",
    endpoint="https://10.0.0.10:6443",
    ca_bundle="LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
    cidr="10.43.0.0/16",
    dns_ip="10.43.0.10",
)
# Label keys and values with every character Kubernetes allows besides letters and digits.
LABELS = {
    "karpenter.sh/nodepool": "default",
    "node.kubernetes.io/instance-type": "m5.large",
    "team.example.com/cost_center": "a-b_c.d",
    "tier": "",
}
TAINTS = (Taint("dedicated", NO_SCHEDULE, "gpu"), Taint("example.com/batch", NO_EXECUTE))
UNREGISTERED = Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE)
SSM_SCRIPT = """#!/bin/bash
TOKEN=$(aws ssm get-parameter --with-decryption --name /my-k3s/token --query Parameter.Value --output text)
echo "joining"
"""


def render(family: str, custom: str = "", max_pods: int | None = 29) -> str:
    return render_user_data(family, custom, cluster=CLUSTER, labels=LABELS, taints=TAINTS, max_pods=max_pods)


def parts(document: str) -> list[Message]:
    message = Parser().parsestr(document)
    assert message.is_multipart()
    payload = message.get_payload()
    assert isinstance(payload, list)
    return [part for part in payload if isinstance(part, Message)]


def body(part: Message) -> str:
    text = part.get_payload()
    assert isinstance(text, str)
    return text


def karpy_node_config(document: str) -> dict[str, Any]:
    first = parts(document)[0]
    assert first.get_content_type() == CONTENT_TYPE_NODECONFIG
    config = yaml.safe_load(body(first))
    assert isinstance(config, dict)
    return config


def labels_of_flag(flag: str) -> dict[str, str]:
    assert flag.startswith("--node-labels=")
    return dict(item.split("=", 1) for item in flag.removeprefix("--node-labels=").split(","))


def taints_of_flag(flag: str) -> set[Taint]:
    assert flag.startswith("--register-with-taints=")
    taints = set()
    for item in flag.removeprefix("--register-with-taints=").split(","):
        key_value, effect = item.rsplit(":", 1)
        key, value = key_value.split("=", 1)
        taints.add(Taint(key, effect, value))
    return taints


# -- AL2023 ------------------------------------------------------------------


def test_al2023_node_config_holds_the_cluster_kubelet_labels_and_taints() -> None:
    config = karpy_node_config(render(AMI_FAMILY_AL2023))
    assert config["apiVersion"] == "node.eks.aws/v1alpha1" and config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {
        "name": "my-k3s",
        "apiServerEndpoint": "https://10.0.0.10:6443",
        "certificateAuthority": CLUSTER.ca_bundle,
        "cidr": "10.43.0.0/16",
    }
    kubelet = config["spec"]["kubelet"]
    assert kubelet["config"]["maxPods"] == 29
    assert kubelet["config"]["clusterDNS"] == ["10.43.0.10"]
    registered = {
        Taint(t["key"], t["effect"], t.get("value", "")) for t in kubelet["config"]["registerWithTaints"]
    }
    assert registered == {*TAINTS, UNREGISTERED}
    (flag,) = kubelet["flags"]
    assert labels_of_flag(flag) == LABELS


def test_al2023_user_shell_script_becomes_a_part_after_karpys_node_config() -> None:
    document = parts(render(AMI_FAMILY_AL2023, SSM_SCRIPT))
    assert [part.get_content_type() for part in document] == [CONTENT_TYPE_NODECONFIG, "text/x-shellscript"]
    assert body(document[1]).rstrip("\n") == SSM_SCRIPT.rstrip("\n")


def test_al2023_user_node_config_without_mime_is_a_node_config_part() -> None:
    user = (
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
        "spec:\n  kubelet:\n    config:\n      cpuCFSQuota: false\n"
    )
    document = parts(render(AMI_FAMILY_AL2023, user))
    assert [part.get_content_type() for part in document] == [CONTENT_TYPE_NODECONFIG] * 2
    assert yaml.safe_load(body(document[1]))["spec"]["kubelet"]["config"] == {"cpuCFSQuota": False}


def test_al2023_user_mime_parts_are_kept_in_order_with_their_headers() -> None:
    user = (
        "MIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="BOUNDARY"\n\n'
        "--BOUNDARY\n"
        "Content-Type: application/node.eks.aws\n\n"
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n"
        "--BOUNDARY\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        "#!/bin/bash\necho second\n"
        "--BOUNDARY--\n"
    )
    document = parts(render(AMI_FAMILY_AL2023, user))
    assert [part.get_content_type() for part in document] == [
        CONTENT_TYPE_NODECONFIG,
        CONTENT_TYPE_NODECONFIG,
        "text/x-shellscript",
    ]
    assert "echo second" in body(document[2])
    assert document[2].get_content_charset() == "us-ascii"


def test_a_body_holding_the_boundary_gets_another_boundary() -> None:
    script = "#!/bin/bash\ncat <<EOF\n--//\nEOF\n"
    document = parts(render(AMI_FAMILY_AL2023, script))
    assert len(document) == 2 and "--//" in body(document[1])


# -- AL2 ---------------------------------------------------------------------


def test_al2_runs_bootstrap_after_the_user_script_with_labels_taints_and_max_pods() -> None:
    document = parts(render(AMI_FAMILY_AL2, SSM_SCRIPT))
    assert [part.get_content_type() for part in document] == ["text/x-shellscript"] * 2
    assert body(document[0]).rstrip("\n") == SSM_SCRIPT.rstrip("\n")
    script = body(document[1])
    assert script.startswith("#!/bin/bash")
    # What bash passes to bootstrap.sh, once continuation lines are joined.
    (command,) = [
        line for line in script.replace("\\\n", " ").splitlines() if "/etc/eks/bootstrap.sh" in line
    ]
    argv = shlex.split(command)
    assert argv[:2] == ["/etc/eks/bootstrap.sh", "my-k3s"]
    options = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert options["--apiserver-endpoint"] == "https://10.0.0.10:6443"
    assert options["--b64-cluster-ca"] == CLUSTER.ca_bundle
    assert options["--dns-cluster-ip"] == "10.43.0.10"
    assert options["--use-max-pods"] == "false"
    kubelet = shlex.split(options["--kubelet-extra-args"])
    assert labels_of_flag(kubelet[0]) == LABELS
    assert taints_of_flag(kubelet[1]) == {*TAINTS, UNREGISTERED}
    assert kubelet[2] == "--max-pods=29"


def test_al2_without_max_pods_lets_bootstrap_compute_it() -> None:
    script = body(parts(render(AMI_FAMILY_AL2, max_pods=None))[-1])
    assert "--use-max-pods" not in script and "--max-pods" not in script


# -- Bottlerocket ------------------------------------------------------------


def test_bottlerocket_sets_karpys_keys_over_the_users_and_keeps_the_rest() -> None:
    user = """
[settings.kubernetes]
cluster-name = "someone-else"
max-pods = 110
image-gc-high-threshold-percent = "85"

[settings.kubernetes.node-labels]
"karpenter.sh/nodepool" = "overridden"
"team.example.com/owner" = "kept"

[settings.kubernetes.node-taints]
"user.example.com/dropped" = ["x:NoSchedule"]

[settings.host-containers.admin]
enabled = true

[settings.autoscaling]
should-wait = true

[[settings.bootstrap-containers-list]]
name = "first"
"""
    settings = tomllib.loads(render(AMI_FAMILY_BOTTLEROCKET, user))["settings"]
    kubernetes = settings["kubernetes"]
    assert kubernetes["cluster-name"] == "my-k3s"
    assert kubernetes["api-server"] == "https://10.0.0.10:6443"
    assert kubernetes["cluster-certificate"] == CLUSTER.ca_bundle
    assert kubernetes["cluster-dns-ip"] == "10.43.0.10"
    assert kubernetes["max-pods"] == 29
    assert kubernetes["image-gc-high-threshold-percent"] == "85"
    assert kubernetes["node-labels"] == {**LABELS, "team.example.com/owner": "kept"}
    # Karpenter replaces the taints whole: the NodeClaim's are what the node registers with.
    assert kubernetes["node-taints"] == {
        "dedicated": ["gpu:NoSchedule"],
        "example.com/batch": [":NoExecute"],
        UNREGISTERED_TAINT_KEY: [":NoExecute"],
    }
    assert settings["host-containers"]["admin"] == {"enabled": True}
    assert settings["autoscaling"]["should-wait"] is False
    assert settings["bootstrap-containers-list"] == [{"name": "first"}]


def test_bottlerocket_without_user_data_is_karpys_settings_only() -> None:
    document = tomllib.loads(render(AMI_FAMILY_BOTTLEROCKET))
    assert set(document) == {"settings"} and set(document["settings"]) == {"kubernetes"}


def test_bottlerocket_user_data_that_is_not_toml_is_refused() -> None:
    with pytest.raises(UserDataError, match="not valid TOML"):
        render(AMI_FAMILY_BOTTLEROCKET, "#!/bin/bash\necho not toml\n")


def test_bottlerocket_values_with_quotes_and_newlines_round_trip() -> None:
    user = '[settings.motd]\ntext = "say \\"hi\\"\\n\\tand\\u007f bye é"\n'
    document = tomllib.loads(render(AMI_FAMILY_BOTTLEROCKET, user))
    assert document["settings"]["motd"]["text"] == 'say "hi"\n\tand\x7f bye é'


# -- Custom and the rest -----------------------------------------------------


def test_custom_is_the_users_user_data_byte_for_byte() -> None:
    user = "#!/bin/bash\r\necho 'no merging' \\\n  here\n\n\n"
    assert render(AMI_FAMILY_CUSTOM, user) == user
    assert render(AMI_FAMILY_CUSTOM, "") == ""


@pytest.mark.parametrize("family", [AMI_FAMILY_AL2023, AMI_FAMILY_AL2, AMI_FAMILY_BOTTLEROCKET])
def test_the_unregistered_taint_is_not_doubled_when_the_caller_passes_it(family: str) -> None:
    document = render_user_data(
        family, "", cluster=CLUSTER, labels=LABELS, taints=(*TAINTS, UNREGISTERED), max_pods=None
    )
    assert document.count(UNREGISTERED_TAINT_KEY) == 1


@pytest.mark.parametrize("family", [AMI_FAMILY_AL2023, AMI_FAMILY_AL2, AMI_FAMILY_BOTTLEROCKET])
@pytest.mark.parametrize(
    ("labels", "taints"),
    [
        ({"team": "a,evil=1"}, ()),
        ({"team": "x' ; reboot ; '"}, ()),
        ({"bad key": "v"}, ()),
        ({}, (Taint("k", NO_SCHEDULE, "v w"),)),
    ],
)
def test_labels_and_taints_that_would_break_the_quoting_are_refused(
    family: str, labels: dict[str, str], taints: tuple[Taint, ...]
) -> None:
    with pytest.raises(UserDataError, match="not a valid Kubernetes"):
        render_user_data(family, "", cluster=CLUSTER, labels=labels, taints=taints)


def test_windows_families_are_refused_with_the_family_named() -> None:
    with pytest.raises(UserDataError, match="Windows2022"):
        render("Windows2022")


@pytest.mark.parametrize("family", [AMI_FAMILY_AL2023, AMI_FAMILY_AL2, AMI_FAMILY_CUSTOM])
def test_a_script_reading_its_secret_from_ssm_reaches_the_node_as_a_script(family: str) -> None:
    """A secret stays in SSM: the document carries only the script that reads it at boot, intact."""
    document = render(family, SSM_SCRIPT)
    if family == AMI_FAMILY_CUSTOM:
        scripts = [document]
    else:
        scripts = [body(part) for part in parts(document) if part.get_content_type() == "text/x-shellscript"]
    assert any(script.rstrip("\n") == SSM_SCRIPT.rstrip("\n") for script in scripts)


# -- from the EC2NodeClass ----------------------------------------------------


def node_class(**spec: Any) -> EC2NodeClass:
    manifest = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-my-k3s",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-k3s"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-k3s"}}],
            **spec,
        },
    }
    return EC2NodeClass.parse(FieldReader(manifest), "karpenter.k8s.aws/v1")


def test_the_family_comes_from_the_alias_and_the_user_data_from_the_class() -> None:
    document = user_data(
        node_class(
            amiSelectorTerms=[{"alias": "al2023@latest"}], userData=SSM_SCRIPT, kubelet={"maxPods": 42}
        ),
        cluster=CLUSTER,
        labels=LABELS,
        taints=TAINTS,
    )
    assert karpy_node_config(document)["spec"]["kubelet"]["config"]["maxPods"] == 42
    assert body(parts(document)[1]).rstrip("\n") == SSM_SCRIPT.rstrip("\n")


def test_an_explicit_family_wins_over_the_alias_and_max_pods_over_the_class() -> None:
    # The CRD (and the file loader) refuse a family other than the alias' or Custom; a class
    # made in code may still hold one, and its family decides.
    aliased = node_class(amiSelectorTerms=[{"alias": "al2023@latest"}], kubelet={"maxPods": 42})
    document = user_data(
        dataclasses.replace(aliased, ami_family="Bottlerocket"),
        cluster=CLUSTER,
        labels=LABELS,
        taints=TAINTS,
        max_pods=7,
    )
    assert tomllib.loads(document)["settings"]["kubernetes"]["max-pods"] == 7


def test_a_class_selecting_its_amis_by_tags_is_custom_and_passed_verbatim() -> None:
    document = user_data(
        node_class(amiFamily="Custom", amiSelectorTerms=[{"tags": {"team": "nodes"}}], userData=SSM_SCRIPT),
        cluster=CLUSTER,
        labels=LABELS,
        taints=TAINTS,
    )
    assert document == SSM_SCRIPT


# -- kubelet reservations ----------------------------------------------------

# The kubelet block of Karpenter's EC2NodeClass docs.
KUBELET = {
    "maxPods": 110,
    "systemReserved": {"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi"},
    "kubeReserved": {"cpu": "200m", "memory": "100Mi", "ephemeral-storage": "3Gi"},
    "evictionHard": {"memory.available": "5%", "nodefs.available": "10%", "nodefs.inodesFree": "10%"},
}
SYSTEM_RESERVED = {"cpu": "100m", "ephemeral-storage": "1Gi", "memory": "100Mi"}
KUBE_RESERVED = {"cpu": "200m", "ephemeral-storage": "3Gi", "memory": "100Mi"}


def documented_kubelet_user_data(family: str, kubelet: dict[str, Any] = KUBELET) -> str:
    alias = {"AL2023": "al2023", "AL2": "al2", "Bottlerocket": "bottlerocket"}[family]
    return user_data(
        node_class(amiSelectorTerms=[{"alias": f"{alias}@latest"}], kubelet=kubelet),
        cluster=CLUSTER,
        labels=LABELS,
        taints=TAINTS,
    )


def test_al2023_node_config_reserves_what_the_class_reserves() -> None:
    """karpy sizes allocatable with these reservations: the kubelet must make the same."""
    config = karpy_node_config(documented_kubelet_user_data(AMI_FAMILY_AL2023))["spec"]["kubelet"]["config"]
    assert config["maxPods"] == 110
    assert config["systemReserved"] == SYSTEM_RESERVED
    assert config["kubeReserved"] == KUBE_RESERVED
    assert config["evictionHard"] == KUBELET["evictionHard"]


def test_al2_kubelet_flags_reserve_what_the_class_reserves() -> None:
    script = body(parts(documented_kubelet_user_data(AMI_FAMILY_AL2))[-1])
    (command,) = [line for line in script.replace("\\\n", " ").splitlines() if "bootstrap.sh" in line]
    argv = shlex.split(command)
    options = dict(zip(argv[2::2], argv[3::2], strict=True))
    flags = dict(flag.split("=", 1) for flag in shlex.split(options["--kubelet-extra-args"]))
    assert flags["--system-reserved"] == "cpu=100m,ephemeral-storage=1Gi,memory=100Mi"
    assert flags["--kube-reserved"] == "cpu=200m,ephemeral-storage=3Gi,memory=100Mi"
    assert flags["--eviction-hard"] == "memory.available<5%,nodefs.available<10%,nodefs.inodesFree<10%"


def test_bottlerocket_settings_reserve_what_the_class_reserves() -> None:
    kubernetes = tomllib.loads(documented_kubelet_user_data(AMI_FAMILY_BOTTLEROCKET))["settings"][
        "kubernetes"
    ]
    assert kubernetes["system-reserved"] == SYSTEM_RESERVED
    assert kubernetes["kube-reserved"] == KUBE_RESERVED
    assert kubernetes["eviction-hard"] == KUBELET["evictionHard"]


def test_reservations_that_would_break_the_flags_are_refused() -> None:
    kubelet = {"evictionHard": {"memory.available": "5%,nodefs.available<0%"}}
    with pytest.raises(UserDataError, match="kubelet"):
        documented_kubelet_user_data(AMI_FAMILY_AL2, kubelet)


@pytest.mark.parametrize(
    "kubelet",
    [{"evictionHard": {"memory.available<1%,x": "5%"}}, {"systemReserved": {"nvidia.com/gpu": "1"}}],
)
def test_reservations_of_unknown_names_are_refused_when_the_class_is_read(kubelet: dict[str, Any]) -> None:
    with pytest.raises(ManifestError, match="valid keys for"):
        documented_kubelet_user_data(AMI_FAMILY_AL2, kubelet)


# -- every other kubelet setting and the instance store policy ------------------

# Every kubelet setting that acts only on the node's kubelet, as Karpenter's docs write them.
KUBELET_ONLY = {
    "clusterDNS": ["fd00::a"],
    "podsPerCore": 8,
    "evictionSoft": {"memory.available": "500Mi", "nodefs.available": "15%"},
    "evictionSoftGracePeriod": {"memory.available": "1m", "nodefs.available": "90s"},
    "evictionMaxPodGracePeriod": 60,
    "imageGCHighThresholdPercent": 85,
    "imageGCLowThresholdPercent": 80,
    "cpuCFSQuota": False,
}


def al2_bootstrap(document: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """bootstrap.sh's options, its kubelet's extra flags and its bare switches, from AL2 user data."""
    script = body(parts(document)[-1])
    (command,) = [line for line in script.replace("\\\n", " ").splitlines() if "bootstrap.sh" in line]
    argv = shlex.split(command)[2:]
    options = dict(zip(argv[::2], argv[1::2], strict=True))
    flags = dict(flag.split("=", 1) for flag in shlex.split(options["--kubelet-extra-args"]))
    return options, flags, argv


def raid0_user_data(family: str) -> str:
    alias = {"AL2023": "al2023", "AL2": "al2", "Bottlerocket": "bottlerocket"}[family]
    return user_data(
        node_class(amiSelectorTerms=[{"alias": f"{alias}@latest"}], instanceStorePolicy="RAID0"),
        cluster=CLUSTER,
        labels=LABELS,
        taints=TAINTS,
    )


def test_al2023_node_config_carries_every_kubelet_setting_of_the_class() -> None:
    config = karpy_node_config(documented_kubelet_user_data(AMI_FAMILY_AL2023, KUBELET_ONLY))["spec"][
        "kubelet"
    ]["config"]
    assert config["clusterDNS"] == ["fd00::a"]
    assert config["podsPerCore"] == 8
    assert config["evictionSoft"] == KUBELET_ONLY["evictionSoft"]
    # Go's form of the durations, as Karpenter writes them.
    assert config["evictionSoftGracePeriod"] == {"memory.available": "1m0s", "nodefs.available": "1m30s"}
    assert config["evictionMaxPodGracePeriod"] == 60
    assert config["imageGCHighThresholdPercent"] == 85
    assert config["imageGCLowThresholdPercent"] == 80
    assert config["cpuCFSQuota"] is False


def test_al2_kubelet_flags_carry_every_kubelet_setting_of_the_class() -> None:
    options, flags, argv = al2_bootstrap(documented_kubelet_user_data(AMI_FAMILY_AL2, KUBELET_ONLY))
    # An IPv6 cluster DNS address makes bootstrap.sh set up the node for IPv6, as Karpenter does.
    assert options["--dns-cluster-ip"] == "fd00::a"
    assert options["--ip-family"] == "ipv6"
    assert flags["--pods-per-core"] == "8"
    assert flags["--eviction-soft"] == "memory.available<500Mi,nodefs.available<15%"
    assert flags["--eviction-soft-grace-period"] == "memory.available=1m0s,nodefs.available=1m30s"
    assert flags["--eviction-max-pod-grace-period"] == "60"
    assert flags["--image-gc-high-threshold"] == "85"
    assert flags["--image-gc-low-threshold"] == "80"
    assert flags["--cpu-cfs-quota"] == "false"
    assert "--local-disks" not in argv


def test_bottlerocket_settings_carry_every_kubelet_setting_it_has() -> None:
    # Bottlerocket has no podsPerCore setting: a class asking for it is refused (below).
    settings = {key: value for key, value in KUBELET_ONLY.items() if key != "podsPerCore"}
    kubernetes = tomllib.loads(documented_kubelet_user_data(AMI_FAMILY_BOTTLEROCKET, settings))["settings"][
        "kubernetes"
    ]
    assert kubernetes["cluster-dns-ip"] == "fd00::a"
    assert kubernetes["eviction-soft"] == KUBELET_ONLY["evictionSoft"]
    assert kubernetes["eviction-soft-grace-period"] == {
        "memory.available": "1m0s",
        "nodefs.available": "1m30s",
    }
    assert kubernetes["eviction-max-pod-grace-period"] == 60
    assert kubernetes["image-gc-high-threshold-percent"] == "85"
    assert kubernetes["image-gc-low-threshold-percent"] == "80"
    assert kubernetes["cpu-cfs-quota-enforced"] is False


def test_the_class_cluster_dns_wins_over_the_clusters() -> None:
    document = documented_kubelet_user_data(AMI_FAMILY_AL2023, {"clusterDNS": ["10.100.0.10", "10.100.0.11"]})
    assert karpy_node_config(document)["spec"]["kubelet"]["config"]["clusterDNS"] == [
        "10.100.0.10",
        "10.100.0.11",
    ]
    options, _, _ = al2_bootstrap(
        documented_kubelet_user_data(AMI_FAMILY_AL2, {"clusterDNS": ["10.100.0.10"]})
    )
    assert options["--dns-cluster-ip"] == "10.100.0.10"
    assert "--ip-family" not in options


def test_a_cluster_dns_that_is_no_address_is_refused() -> None:
    with pytest.raises(UserDataError, match="clusterDNS"):
        documented_kubelet_user_data(AMI_FAMILY_AL2, {"clusterDNS": ["10.0.0.10 --x"]})


def test_raid0_makes_each_familys_bootstrap_assemble_the_instance_store() -> None:
    config = karpy_node_config(raid0_user_data(AMI_FAMILY_AL2023))
    assert config["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    _, _, argv = al2_bootstrap(raid0_user_data(AMI_FAMILY_AL2))
    assert argv[argv.index("--local-disks") + 1] == "raid0"
    settings = tomllib.loads(raid0_user_data(AMI_FAMILY_BOTTLEROCKET))["settings"]
    command = settings["bootstrap-commands"]["000-mount-instance-storage"]
    assert command["commands"][0] == ["apiclient", "ephemeral-storage", "init"]
    assert command["commands"][1][:3] == ["apiclient", "ephemeral-storage", "bind"]
    assert command["essential"] is True and command["mode"] == "always"


def test_without_raid0_no_family_touches_the_instance_store() -> None:
    for family in (AMI_FAMILY_AL2023, AMI_FAMILY_BOTTLEROCKET):
        document = documented_kubelet_user_data(family, {})
        assert "RAID0" not in document and "ephemeral-storage" not in document
    _, _, argv = al2_bootstrap(documented_kubelet_user_data(AMI_FAMILY_AL2, {}))
    assert "--local-disks" not in argv


@pytest.mark.parametrize("field", sorted(set(KUBELET_ONLY) - {"podsPerCore"}))
def test_a_custom_class_refuses_each_kubelet_setting_only_karpys_user_data_carries(field: str) -> None:
    kubelet = {field: KUBELET_ONLY[field]}
    named = field
    if field.startswith("evictionSoft"):  # the two come together; the first is named
        kubelet = {key: KUBELET_ONLY[key] for key in ("evictionSoft", "evictionSoftGracePeriod")}
        named = "evictionSoft"
    with pytest.raises(
        ManifestError, match=f"spec.kubelet.{named}: kubelet.{named} cannot act with amiFamily Custom"
    ):
        node_class(amiFamily="Custom", amiSelectorTerms=[{"tags": {"team": "nodes"}}], kubelet=kubelet)


def test_a_soft_eviction_grace_period_that_is_no_duration_is_refused_when_the_class_is_read() -> None:
    with pytest.raises(ManifestError, match="evictionSoftGracePeriod"):
        documented_kubelet_user_data(
            AMI_FAMILY_AL2,
            {
                "evictionSoft": {"memory.available": "5%"},
                "evictionSoftGracePeriod": {"memory.available": "1d"},
            },
        )


def test_a_bottlerocket_class_refuses_pods_per_core_which_its_settings_lack() -> None:
    with pytest.raises(ManifestError, match=r"kubelet\.podsPerCore cannot act on Bottlerocket"):
        documented_kubelet_user_data(AMI_FAMILY_BOTTLEROCKET, {"podsPerCore": 4})


@pytest.mark.parametrize("family", [AMI_FAMILY_AL2, AMI_FAMILY_BOTTLEROCKET])
def test_a_second_cluster_dns_address_is_refused_where_the_bootstrap_takes_one(family: str) -> None:
    with pytest.raises(ManifestError, match="clusterDNS takes one address"):
        documented_kubelet_user_data(family, {"clusterDNS": ["10.100.0.10", "10.100.0.11"]})
