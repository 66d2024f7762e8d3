"""The K3s recipe's manifests validate, and the join check accepts its script and refuses broken ones.

Each broken script is the example's with one piece removed or changed, so
every refusal is shown to come from that piece, with its own message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from tests.aws.k3s_join import K3sJoinError, check_k3s_join
from tests.support import run_cli

from karpy.api._reader import FieldReader
from karpy.api.nodeclass import EC2NodeClass
from karpy.api.taints import NO_EXECUTE, NO_SCHEDULE, UNREGISTERED_TAINT_KEY, Taint
from karpy.cloud.aws.userdata import AMI_FAMILY_AL2, ClusterInfo, render_user_data, user_data

EXAMPLES = Path(__file__).parents[3] / "examples" / "aws"


def example_user_data() -> str:
    node_class = yaml.safe_load((EXAMPLES / "ec2nodeclass.yaml").read_text(encoding="utf-8"))
    text = node_class["spec"]["userData"]
    assert isinstance(text, str)
    return text


def test_the_example_manifests_validate_strictly(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "validate", "--strict", str(EXAMPLES))
    assert code == 0, err
    for name in ("EC2NodeClass default", "NodePool default", "Deployment karpenter-test"):
        assert name in out
    node_class = yaml.safe_load((EXAMPLES / "ec2nodeclass.yaml").read_text(encoding="utf-8"))
    assert node_class["spec"]["amiFamily"] == "Custom"


def test_the_example_script_is_a_k3s_join() -> None:
    join = check_k3s_join(example_user_data())
    assert join.server_url == "https://10.0.0.10:6443"
    assert join.token_parameter == "/my-k3s/k3s-node-token"
    assert join.taints == (Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE),)
    assert join.labels == {}
    assert join.node_name_from == "local-hostname"


def test_the_example_class_launches_with_its_script_verbatim() -> None:
    """What karpy puts in the launch template for the example class is the script the check accepts."""
    manifest = yaml.safe_load((EXAMPLES / "ec2nodeclass.yaml").read_text(encoding="utf-8"))
    node_class = EC2NodeClass.parse(FieldReader(manifest), manifest["apiVersion"])
    assert node_class.metadata_options.http_tokens == "required"
    document = user_data(
        node_class,
        cluster=ClusterInfo("my-k3s", "https://10.0.0.10:6443"),
        labels={"karpenter.sh/nodepool": "default"},
        taints=(),
    )
    assert document == example_user_data()
    assert check_k3s_join(document).server_url == "https://10.0.0.10:6443"


def test_the_script_inside_a_mime_document_is_read() -> None:
    """The same script as the user part of an AL2 document (karpy's bootstrap part is ignored)."""
    document = render_user_data(
        AMI_FAMILY_AL2,
        example_user_data(),
        cluster=ClusterInfo("my-k3s", "https://10.0.0.10:6443"),
        labels={},
        taints=(),
    )
    assert check_k3s_join(document).token_parameter == "/my-k3s/k3s-node-token"


def test_extra_taints_labels_and_a_server_flag_are_returned() -> None:
    script = (
        example_user_data()
        .replace('K3S_URL="$K3S_URL" ', "")
        .replace(
            "--node-taint karpenter.sh/unregistered:NoExecute",
            "--server $K3S_URL --node-taint=karpenter.sh/unregistered:NoExecute"
            " --node-taint dedicated=gpu:NoSchedule --node-label team=ml --node-label=tier=batch",
        )
    )
    join = check_k3s_join(script)
    assert join.server_url == "https://10.0.0.10:6443"
    assert join.taints == (Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE), Taint("dedicated", NO_SCHEDULE, "gpu"))
    assert join.labels == {"team": "ml", "tier": "batch"}


def test_a_k3s_binary_started_directly_with_an_exported_token_is_a_join() -> None:
    script = (
        example_user_data()
        .replace("TOKEN=$(aws ssm", "export K3S_TOKEN=$(aws ssm")
        .replace(
            'curl -sfL https://get.k3s.io | K3S_URL="$K3S_URL" K3S_TOKEN="$TOKEN" sh -s - agent',
            '/usr/local/bin/k3s agent --server "$K3S_URL"',
        )
    )
    assert check_k3s_join(script).token_parameter == "/my-k3s/k3s-node-token"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param("#!/bin/bash\n", "", "neither a shell script", id="not-a-script"),
        pytest.param("sh -s - agent", "sh -s - server", "no K3s agent is started", id="no-agent"),
        pytest.param(
            '-X PUT "http://169.254.169.254/latest/api/token"',
            '"http://169.254.169.254/latest/api/token"',
            "no IMDSv2 session token",
            id="token-not-put",
        ),
        pytest.param(
            ' -H "X-aws-ec2-metadata-token-ttl-seconds: 300"',
            "",
            "no IMDSv2 session token",
            id="no-ttl-header",
        ),
        pytest.param(
            '-H "X-aws-ec2-metadata-token: $IMDS_TOKEN" "http://169.254.169.254/latest/meta-data/instance-id"',
            '"http://169.254.169.254/latest/meta-data/instance-id"',
            r"\$INSTANCE_ID, which must hold meta-data/instance-id .* without the IMDSv2 token header",
            id="instance-id-imdsv1",
        ),
        pytest.param(
            "meta-data/placement/availability-zone",
            "meta-data/placement/region",
            r"\$ZONE, which must hold meta-data/placement/availability-zone",
            id="zone-not-read",
        ),
        pytest.param(
            "--kubelet-arg=provider-id=aws:///$ZONE/$INSTANCE_ID",
            "",
            "not given the provider id",
            id="no-provider-id",
        ),
        pytest.param(
            "provider-id=aws:///$ZONE/$INSTANCE_ID",
            "provider-id=aws:///us-east-1a/$INSTANCE_ID",
            "is not aws:///\\$ZONE/\\$INSTANCE_ID",
            id="provider-id-fixed-zone",
        ),
        pytest.param(
            "--node-taint karpenter.sh/unregistered:NoExecute",
            "--node-taint karpenter.sh/unregistered:NoSchedule",
            "does not register with the taint karpenter.sh/unregistered:NoExecute",
            id="no-unregistered-taint",
        ),
        pytest.param(
            'K3S_TOKEN="$TOKEN"',
            "K3S_TOKEN=K10abc::server:secret",
            "a literal K3S_TOKEN value",
            id="literal-token",
        ),
        pytest.param(
            'TOKEN_PARAMETER="/my-k3s/k3s-node-token"\n',
            'TOKEN_PARAMETER="/my-k3s/k3s-node-token"\nK3S_TOKEN=K10abc::server:secret\n',
            "a literal K3S_TOKEN value",
            id="literal-token-elsewhere",
        ),
        pytest.param('K3S_TOKEN="$TOKEN" ', "", "no join token is given", id="no-token"),
        pytest.param(
            "TOKEN=$(aws ssm get-parameter",
            "TOKEN=$(cat /etc/k3s-token; aws ssm get-parameter",
            "is not read with aws ssm get-parameter",
            id="token-not-from-ssm",
        ),
        pytest.param(" --with-decryption", "", "without --with-decryption", id="not-decrypted"),
        pytest.param(' --name "$TOKEN_PARAMETER"', "", "is not named", id="no-parameter-name"),
        pytest.param('K3S_URL="$K3S_URL" ', "", "no K3s server URL", id="no-server"),
        pytest.param('--node-name "$NODE_NAME"', "--node-name worker", "a fixed name", id="fixed-node-name"),
    ],
)
def test_each_missing_piece_is_refused_with_its_message(old: str, new: str, message: str) -> None:
    script = example_user_data()
    assert old in script  # the piece is in the example, so removing it is what is tested
    with pytest.raises(K3sJoinError, match=message):
        check_k3s_join(script.replace(old, new, 1))


def test_the_policies_and_patterns_in_docs_aws_are_json() -> None:
    """The IAM policies and event patterns users paste from docs/aws.md are well-formed."""
    text = (EXAMPLES.parents[1] / "docs" / "aws.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    patterns = re.findall(r"^\| [^|]+ \| `(\{.*\})` \|$", text, flags=re.M)
    assert len(blocks) >= 4 and len(patterns) == 5
    documents = [json.loads(block) for block in blocks]
    controller = next(
        d for d in documents if any(s.get("Sid") == "AllowScopedDeletion" for s in d["Statement"])
    )
    actions = {
        a
        for s in controller["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert {"ec2:CreateFleet", "ec2:TerminateInstances", "sqs:ReceiveMessage", "iam:PassRole"} <= actions
    # Capacity reservations are resolved by the controller (the ReservedCapacity gate is on by default).
    assert "ec2:DescribeCapacityReservations" in actions
    assert {json.loads(pattern)["source"][0] for pattern in patterns} == {"aws.ec2", "aws.health"}
