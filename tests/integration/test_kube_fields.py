"""The bundled field names are the real API server's, and karpy refuses what it refuses.

``scripts/gen_kube_fields.py --check`` regenerates the field trees from this
control plane's ``/openapi/v2`` and compares them with the bundled file; then a
manifest with a misspelt field is sent to the API server with strict field
validation (``kubectl apply --dry-run=server --validate=strict``) and read by
karpy: both name the same unknown field.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.conftest import ControlPlane

from karpy.api.manifest import parse_manifests

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: it-fields, namespace: default}
spec:
  replica: 2
  selector: {matchLabels: {app: it-fields}}
  template:
    metadata: {labels: {app: it-fields}}
    spec:
      containers:
        - name: app
          image: registry.invalid/app:1
          resources: {requets: {cpu: 100m}}
"""


def test_the_bundled_field_trees_are_what_the_api_server_serves(control_plane: ControlPlane) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_kube_fields.py"), "--check"],
        env={**os.environ, **control_plane.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_karpy_and_the_api_server_refuse_the_same_unknown_fields(control_plane: ControlPlane) -> None:
    refused = subprocess.run(
        [
            control_plane.kubectl_path,
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            "-",
        ],
        input=DEPLOYMENT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode != 0
    errors = parse_manifests(DEPLOYMENT, "deployment.yaml").errors
    assert len(errors) == 2
    for path in ("spec.replica", "spec.template.spec.containers[0].resources.requets"):
        assert f'unknown field "{path}"' in refused.stderr
        assert any(f'unknown field "{path}"' in error for error in errors)
