"""A pod's resources as written, container by container, and the requests the kube-scheduler reserves.

A pod is scheduled by one sum of requests (:meth:`PodResources.effective_requests`),
but that sum is not all a pod spec says: admission still changes it when the
pod is created (LimitRange defaults fill a container's missing requests and
limits, a RuntimeClass sets the pod's overhead; :mod:`karpy.api.admission`).
A template's pod is sized before that happens (a DaemonSet's pod on a node
not launched yet, a Deployment's next replica in the simulator), so what the
containers say is kept beside the sum, and the sum is worked out again from
it once admission has had its say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from karpy.api.quantity import HUGEPAGES_PREFIX, ResourceAmounts, add_amounts, max_amounts

# The resources a pod's spec.resources may name, besides huge pages.
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})


def _pod_level_resource(name: str) -> bool:
    """Whether ``spec.resources`` may name ``name`` (CPU, memory and huge pages only)."""
    return name in POD_LEVEL_RESOURCES or name.startswith(HUGEPAGES_PREFIX)


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """One container's ``resources``, requests defaulted to limits as the API server decodes them."""

    requests: ResourceAmounts = field(default_factory=dict)
    limits: ResourceAmounts = field(default_factory=dict)
    # An init container (run before the app containers), and whether it is a
    # restartable sidecar (restartPolicy Always) that keeps running beside them.
    init: bool = False
    sidecar: bool = False

    @classmethod
    def of(
        cls, requests: ResourceAmounts, limits: ResourceAmounts, *, init: bool = False, sidecar: bool = False
    ) -> ContainerResources:
        """A container as written: a resource with a limit and no request requests its limit."""
        return cls({**limits, **requests}, dict(limits), init, sidecar)

    def with_defaults(self, requests: ResourceAmounts, limits: ResourceAmounts) -> ContainerResources:
        """The container with ``requests`` and ``limits`` filling what it does not set itself.

        A resource left without a request after that requests its (perhaps
        just defaulted) limit, as it would have had the limit been written.
        """
        merged_limits = {**limits, **self.limits}
        merged_requests = {**merged_limits, **requests, **self.requests}
        if merged_limits == self.limits and merged_requests == self.requests:
            return self
        return dataclasses.replace(self, requests=merged_requests, limits=merged_limits)


@dataclass(frozen=True, slots=True)
class PodResources:
    """What a pod spec says of resources: its containers', its own (``spec.resources``) and its overhead."""

    containers: tuple[ContainerResources, ...] = ()
    pod_requests: ResourceAmounts = field(default_factory=dict)
    pod_limits: ResourceAmounts = field(default_factory=dict)
    overhead: ResourceAmounts = field(default_factory=dict)

    def effective_requests(self) -> ResourceAmounts:
        """Requests as the kube-scheduler computes them for a pod.

        max(sum of app containers + all restartable init containers (sidecars),
        max over each init container of its requests + sidecars started before it),
        with pod-level requests (``spec.resources``, on by default since
        Kubernetes 1.34) in place of that for the resources they name, plus the
        pod's overhead. A pod-level limit stands for the request of a resource no
        container requests, as the API server defaults it.
        """
        result = self._containers_peak(lambda container: container.requests)
        pod_requests = dict(self.pod_requests)
        for name, amount in self.pod_limits.items():
            if name not in result:
                pod_requests.setdefault(name, amount)
        result |= {name: amount for name, amount in pod_requests.items() if _pod_level_resource(name)}
        return add_amounts(result, self.overhead)

    def effective_limits(self) -> ResourceAmounts:
        """Limits summed as Karpenter's metrics sum them: the containers' as for requests, pod-level
        limits in place of those for what they name, plus the overhead; none if nothing is limited."""
        limits = self._containers_peak(lambda container: container.limits) | dict(self.pod_limits)
        return add_amounts(limits, self.overhead) if limits else {}

    def _containers_peak(self, amounts: Callable[[ContainerResources], ResourceAmounts]) -> ResourceAmounts:
        """max(app containers + sidecars, each init container + the sidecars started before it)."""
        containers: ResourceAmounts = {}
        sidecars: ResourceAmounts = {}
        init_peak: ResourceAmounts = {}
        for container in self.containers:
            if not container.init:
                containers = add_amounts(containers, amounts(container))
            elif container.sidecar:
                sidecars = add_amounts(sidecars, amounts(container))
                init_peak = max_amounts(init_peak, sidecars)
            else:
                init_peak = max_amounts(init_peak, add_amounts(sidecars, amounts(container)))
        return max_amounts(add_amounts(containers, sidecars), init_peak)
