"""What the controllers and the cloud providers both stand on: the operator's own floor.

A cloud provider is more than calls the controllers make: the AWS provider
runs controllers of its own (EC2NodeClass status, price refresh, launch
template cleanup, the interruption queue) on the same reconcile runtime, and
the kwok provider creates Nodes through the same cluster protocol. What both
need lives here, below :mod:`karpy.cloud` and :mod:`karpy.controllers`, so
that dependencies only point down:

- :mod:`~karpy.operator.cluster`: the Cluster/ClusterReader/ClusterWriter
  protocols, the Clock, the typed errors writes raise, the Event types;
- :mod:`~karpy.operator.reads`: the typed reads both caches (the simulator's
  store, ``karpy run``'s informers) build on their two primitives;
- :mod:`~karpy.operator.runtime`: the reconcile runtime and its work queue
  (Watch, ChangeMapper, the Controller protocol);
- :mod:`~karpy.operator.metrics` and :mod:`~karpy.operator.karpenter_metrics`:
  the Prometheus registry and Karpenter's metric families;
- :mod:`~karpy.operator.readiness`: ``Ready`` conditions summarizing others;
- :mod:`~karpy.operator.interruption`: the interruption message types.

What belongs here is what a provider and a controller share and that makes
no decision of its own; a controller belongs in :mod:`karpy.controllers`, a
provider's code in :mod:`karpy.cloud`. This package imports only
:mod:`karpy.api` and :mod:`karpy.logs` (an import-linter contract says so).
"""
