"""KubeCluster against a kube-apiserver with the WatchList feature gate off.

Such a server refuses a watch with ``sendInitialEvents`` (422, "forbidden for
watch unless the WatchList feature gate is enabled"), as do servers before
Kubernetes 1.27: the informers then list, watch from the list's
resourceVersion, and do not ask again. The module starts a control plane of its
own (``KARPY_APISERVER_ARGS``), as the shared one has the gate on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from karpy.kube._http import ApiTransport
from karpy.kube._resources import NODEPOOL, POD
from karpy.kube.cluster import KubeCluster

from .conftest import FAKE_KUBELET_AGENT, ControlPlane, install_crds, running_control_plane, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plane_without_watch_list(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "KARPY_APISERVER_ARGS",
            f"{os.environ.get('KARPY_APISERVER_ARGS', '')} --feature-gates=WatchList=false",
        )
        with running_control_plane(tmp_path_factory, pytestconfig, FAKE_KUBELET_AGENT) as plane:
            patch.undo()
            install_crds(plane)
            yield plane


def _pod(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"karpy.test/none": "true"},
                "containers": [{"name": "c", "image": "registry.invalid/c:1"}],
            },
        }
    )


def test_informers_list_and_watch_where_the_server_refuses_streaming(
    plane_without_watch_list: ControlPlane,
) -> None:
    plane = plane_without_watch_list
    plane.kubectl("apply", "--namespace", "default", "-f", "-", stdin=_pod("listed"))
    kube = KubeCluster(ApiTransport.from_kubeconfig(plane.kubeconfig), kinds=(POD, NODEPOOL))
    kube.start()
    try:
        assert kube.wait_for_sync(60)
        assert kube.pod("default", "listed") is not None
        assert (kube.lists("Pod"), kube.initial_streams("Pod")) == (1, 0)
        assert (kube.lists("NodePool"), kube.initial_streams("NodePool")) == (1, 0)
        plane.kubectl("apply", "--namespace", "default", "-f", "-", stdin=_pod("watched"))
        wait_until(lambda: kube.pod("default", "watched"), what="a pod created after the list")
        assert kube.lists("Pod") == 1
    finally:
        kube.close()
        plane.kubectl("delete", "pod", "listed", "watched", "--namespace", "default", "--ignore-not-found")
