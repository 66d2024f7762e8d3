"""The chaos suite runs on the integration tests' control plane: their fixtures, shared."""

from tests.integration.conftest import control_plane, crds, namespace

__all__ = ["control_plane", "crds", "namespace"]
