"""The API server connection's CA: what the AWS provider gives nodes and hashes without CLUSTER_CA_BUNDLE."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from karpy.kube._http import ApiTransport

# A self-signed CA (the client loads it, so it must be a real certificate).
PEM = (Path(__file__).parents[1] / "data" / "kube" / "ca.crt").read_bytes()


def kubeconfig(tmp_path: Path, cluster: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:6443', {cluster}}}}}]\n"
        "contexts: [{name: ctx, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    return path


@pytest.mark.parametrize("written", ["data", "file"])
def test_the_ca_is_the_connections_as_base64_pem_as_karpenter_discovers_it(
    tmp_path: Path, written: str
) -> None:
    (tmp_path / "ca.crt").write_bytes(PEM)
    cluster = (
        f"certificate-authority-data: {base64.b64encode(PEM).decode()}"
        if written == "data"
        else "certificate-authority: ca.crt"  # relative to the kubeconfig, as kubectl reads it
    )
    transport = ApiTransport.from_kubeconfig(kubeconfig(tmp_path, cluster))
    try:
        assert transport.ca_bundle == base64.b64encode(PEM).decode()
    finally:
        transport.close()


def test_a_connection_that_names_no_ca_has_none(tmp_path: Path) -> None:
    transport = ApiTransport.from_kubeconfig(kubeconfig(tmp_path, "insecure-skip-tls-verify: true"))
    try:
        assert transport.ca_bundle == ""
    finally:
        transport.close()
