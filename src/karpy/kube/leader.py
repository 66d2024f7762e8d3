"""Lease leader election: any number of ``karpy run`` replicas, one of them acting.

Two replicas that both reconcile would both see the same pending pods and
both launch nodes for them, so a highly available deployment needs exactly
one replica acting and the others ready to take over. Kubernetes components
agree on that through a ``coordination.k8s.io/v1`` Lease: whoever's name is in
``spec.holderIdentity``, renewed recently enough, is the leader. This module
is that protocol as client-go's ``leaderelection`` package runs it, so karpy
replicas behave like Karpenter's (and kube-controller-manager's) do, over
karpy's own :class:`~karpy.kube._http.ApiTransport`.

**The lease.** ``karpy-leader-election`` in the namespace karpy runs in, as
Karpenter's is ``karpenter-leader-election`` in Karpenter's namespace (a
different name, so karpy and Karpenter never take each other's lease). A
replica's identity is its hostname (the pod name in a cluster) and a random
suffix, joined by ``_`` as controller-runtime does, so a restarted pod is a
new candidate and never mistakes an old record for its own.

**Acquiring.** A candidate reads the Lease. None: it creates one naming
itself. Held by someone else and still valid: it stands by and tries again a
retry period later (with client-go's jitter, so candidates do not move in
lock step). Free (no holder, after a release) or expired: it writes itself in
with an update that carries the resourceVersion it read, so when two
candidates race for the same expired lease the server takes exactly one
write and answers the other with 409 Conflict. Every write goes through the
API server's optimistic concurrency; nothing else arbitrates.

**Clocks are not compared across machines.** ``renewTime`` is written with
the holder's wall clock, which may be minutes off the candidate's. Like
client-go, a candidate never reads it as a time: it only notices that the
record *changed* and notes when, on its own monotonic clock. The lease is
expired once the record has stayed the same for ``leaseDurationSeconds`` of
the candidate's time. The consequence is deliberate caution: a fresh
candidate that finds a long-dead holder's record still waits one full lease
duration before taking it.

**Renewing and giving up.** The leader rewrites ``renewTime`` every retry
period (one PUT with the resourceVersion of its own last write; a GET first
only when that fails). If no renewal has succeeded for the renew deadline,
measured from the *start* of the last successful one, it stops leading, and
:meth:`LeaderElector.is_leader` turns False at that instant even if the
election thread is stuck in a request. The deadline is shorter than the lease
duration, and a candidate's expiry clock starts no earlier than the renewal
it observed, so the old leader has stopped acting for at least
``lease_duration - renew_deadline`` (5 s by default) before anyone else can
start, however the network fails. Every write ``karpy run`` makes, to the API
server or to the cloud, passes :meth:`LeaderElector.check_leading` first (the
*fence*): from that instant on not one more write leaves the process, whatever
thread it comes from. A write already sent may still be applied by the server
afterwards (it cannot be called back); it was sent while the lease was held,
and the next leader reads its outcome from the server before acting. An
elector that lost its lease does not run for it again: ``karpy run`` exits,
as controller-runtime's manager does, and the restarted process joins as a
fresh candidate with caches of its own.

**Releasing.** On a graceful stop the leader writes the lease with no holder
(and a one-second duration, for candidates that only look at durations), so
a candidate takes over on its next try instead of after the lease duration.

The defaults are client-go's and controller-runtime's: a 15 s lease, a 10 s
renew deadline, a 2 s retry period. A killed leader is therefore replaced
about a lease duration after its last renewal, give or take a retry (15-20
s); a stopped one at a standby's next try (at most 4.4 s).
"""

from __future__ import annotations

import logging
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from karpy.kube._http import HTTP_CONFLICT, HTTP_NOT_FOUND, JSON, ApiResponse, ApiStatusError
from karpy.kube._resources import ResourceType
from karpy.logs import doubled
from karpy.operator.cluster import NotLeaderError
from karpy.settings import parse_bool

log = logging.getLogger("karpy.kube.leader")

LEASE = ResourceType("Lease", "coordination.k8s.io/v1", "leases", namespaced=True)

DEFAULT_LEASE_NAME = "karpy-leader-election"
# Where a pod's service account token mounts its namespace: the namespace karpy runs in.
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# Outside a cluster, with no namespace in the kubeconfig's context: kubectl's default namespace.
FALLBACK_NAMESPACE = "default"
# A candidate refused the Lease (401, 403) tries again after a retry period, then twice as late
# each time in a row, up to this: nothing will change until someone fixes the permissions.
REFUSED_RETRY_MAX = 30.0
HTTP_UNAUTHORIZED = 401
HTTP_FORBIDDEN = 403

# client-go's and controller-runtime's defaults, in seconds.
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
# A candidate waits retry_period * (1 + JITTER_FACTOR * random()) between tries, as client-go does.
JITTER_FACTOR = 1.2
# No request is sent with less time than this to answer, even close to a deadline.
MIN_REQUEST_TIMEOUT = 0.2


class LeadershipLostError(NotLeaderError):
    """This replica does not lead, or no longer does: it must stop acting at once."""


def default_identity() -> str:
    """``<hostname>_<random>``: unique per process, and the pod's name in a cluster."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def default_namespace(
    namespace_file: Path = IN_CLUSTER_NAMESPACE_FILE, kubeconfig_namespace: str | None = None
) -> str:
    """Where the Lease goes when no flag or variable says: the namespace karpy runs in.

    In a pod, the pod's namespace (its service account mount); out of a cluster,
    the namespace of the kubeconfig's current context, as kubectl takes it;
    else :data:`FALLBACK_NAMESPACE` (kubectl's default). controller-runtime
    refuses to start out of a cluster without a namespace; kubectl's rule is
    kinder to a laptop, and a namespace the identity may not write Leases in
    is said in one line (and /readyz fails) instead.
    """
    try:
        namespace = namespace_file.read_text().strip()
    except OSError:
        namespace = ""
    return namespace or kubeconfig_namespace or FALLBACK_NAMESPACE


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    namespace: str
    name: str = DEFAULT_LEASE_NAME
    identity: str = field(default_factory=default_identity)
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD

    def __post_init__(self) -> None:
        # The orderings client-go insists on: without them a leader could still be acting
        # when a candidate takes over, or give up before it has tried to renew.
        if not self.namespace or not self.name or not self.identity:
            raise ValueError("leader election needs a lease namespace, a lease name and an identity")
        if self.retry_period <= 0:
            raise ValueError("the retry period must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("the lease duration must be longer than the renew deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(f"the renew deadline must be longer than {JITTER_FACTOR:g} retry periods")


def election_config(
    *,
    disable: str | None,
    name: str | None,
    namespace: str | None,
    environ: Mapping[str, str],
    namespace_file: Path = IN_CLUSTER_NAMESPACE_FILE,
    kubeconfig_namespace: str | None = None,
) -> LeaderElectionConfig | None:
    """The election ``karpy run`` takes part in, from its flags (None: not given) and environment.

    Karpenter's settings and precedence: a flag, else its environment
    variable (``DISABLE_LEADER_ELECTION``, ``LEADER_ELECTION_NAME``,
    ``LEADER_ELECTION_NAMESPACE``), else the default (:func:`default_namespace`,
    given the kubeconfig context's namespace, if any). None when disabled.
    Raises ValueError for a value that is not a boolean.
    """
    if disable is not None:
        disabled = parse_bool(disable, "--disable-leader-election")
    else:  # an empty variable counts as unset, as for every other setting
        disabled = parse_bool(environ.get("DISABLE_LEADER_ELECTION") or "false", "DISABLE_LEADER_ELECTION")
    if disabled:
        return None
    return LeaderElectionConfig(
        namespace=namespace
        or environ.get("LEADER_ELECTION_NAMESPACE")
        or default_namespace(namespace_file, kubeconfig_namespace),
        name=name or environ.get("LEADER_ELECTION_NAME") or DEFAULT_LEASE_NAME,
    )


class LeaseTransport(Protocol):
    """The one call the elector makes (ApiTransport.request; a fake in unit tests)."""

    def request(self, method: str, path: str, *, body: object = ..., timeout: float = ...) -> ApiResponse: ...


def format_micro_time(seconds: float) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The fields of a Lease's spec the election reads; two reads differ iff someone wrote."""

    holder: str
    duration_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int

    @classmethod
    def of(cls, lease: JSON) -> LeaseRecord:
        spec = lease.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _deep_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_copy(item) for item in value]
    return value


class LeaderElector:
    """One candidate's side of the election for one Lease.

    :meth:`tick` is one step of the state machine (one try to acquire or
    renew, and the decision that follows); :meth:`start` runs the steps on a
    thread of their own, which is how ``karpy run`` uses it. Only that thread
    writes the Lease; :meth:`is_leader` may be asked from any thread.
    """

    def __init__(
        self,
        transport: LeaseTransport,
        config: LeaderElectionConfig,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.config = config
        self._transport = transport
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._jitter = jitter
        self._path = LEASE.object_path(config.namespace, config.name)
        self._lock = threading.Lock()
        # The last Lease read or written (its resourceVersion is the next write's precondition),
        # its record, and when (monotonic) that record was first seen.
        self._lease: JSON | None = None
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._leading = False
        # Monotonic start of the last successful acquire or renew: the renew deadline runs from it.
        self._renewed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.elected = threading.Event()
        self.lost = threading.Event()
        # Why the server refuses this identity the Lease (401, 403), while it does; "" otherwise.
        self._refused = ""
        self._refused_in_a_row = 0

    @property
    def identity(self) -> str:
        return self.config.identity

    @property
    def lease_name(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    @property
    def holder(self) -> str:
        """The holder in the last record seen ("" when free or not read yet)."""
        observed = self._observed
        return observed.holder if observed is not None else ""

    @property
    def refused(self) -> str:
        """Why this replica cannot take part in the election now (the Lease is refused it); "" if it can."""
        return self._refused

    def is_leader(self) -> bool:
        """True while this replica holds the lease and its last renewal is within the renew deadline."""
        with self._lock:
            return self._leading and self._monotonic() - self._renewed_at < self.config.renew_deadline

    def check_leading(self) -> None:
        """Raise :class:`LeadershipLostError` unless this replica leads at this instant.

        The loop asks it between passes, and it is the write fence: called before
        every write ``karpy run`` makes (see :meth:`ApiTransport.fenced` and
        :meth:`AwsClient.fence`), so a reconcile whose leadership lapsed half-way
        stops before its next write, and a timer or a worker thread of a replica
        that lost the lease writes nothing more.
        """
        if not self.is_leader():
            raise LeadershipLostError(f"lost lease {self.lease_name} (identity {self.identity})")

    def wait_for_leadership(self, timeout: float) -> bool:
        return self.elected.wait(timeout)

    # -- the state machine ----------------------------------------------------

    def tick(self) -> float | None:
        """One step: try to acquire or renew; the seconds until the next step, None once lost."""
        config = self.config
        with self._lock:
            leading, renewed_at = self._leading, self._renewed_at
        if leading:
            deadline = renewed_at + config.renew_deadline
            if self._monotonic() < deadline and self._attempt(deadline):
                return config.retry_period
            if self.holder and self.holder != self.identity:
                # Someone else holds a lease that is valid by our clock: we are not the leader, now.
                self._lose(f"the lease is held by {self.holder}")
                return None
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                self._lose(f"could not renew the lease for {config.renew_deadline:g}s")
                return None
            return min(config.retry_period, remaining)
        if self._attempt(self._monotonic() + config.renew_deadline):
            log.info("acquired lease %s as %s: leading", self.lease_name, self.identity)
            self.elected.set()
            return config.retry_period
        if self._refused:
            # Refused the Lease: backing off, as trying every retry period changes nothing.
            return doubled(config.retry_period, self._refused_in_a_row, REFUSED_RETRY_MAX)
        return config.retry_period * (1 + JITTER_FACTOR * self._jitter())

    def _attempt(self, deadline: float) -> bool:
        # Any failure of one try (an error status, a timeout, a dropped connection) is
        # only a failed try: the caller's deadline decides what it means.
        try:
            taken = self.try_acquire_or_renew(deadline)
        except ApiStatusError as error:
            if error.code in (HTTP_UNAUTHORIZED, HTTP_FORBIDDEN):
                self._refuse(error)
                return False
            log.warning("lease %s: %s", self.lease_name, error)
        except Exception as error:
            log.warning("lease %s: %s: %s", self.lease_name, type(error).__name__, error)
        else:
            if self._refused:
                log.info("lease %s: no longer refused", self.lease_name)
            self._refused, self._refused_in_a_row = "", 0
            return taken
        return False

    def _refuse(self, error: ApiStatusError) -> None:
        """The server refused this identity the Lease: say it once, with what to set."""
        namespace = self.config.namespace
        why = (
            f"the API server refused lease {self.lease_name} ({error.code} {error.reason or 'Forbidden'}: "
            f"{error.message}): this identity may not read and write Leases in namespace {namespace!r}; "
            "set LEADER_ELECTION_NAMESPACE (or --leader-election-namespace) to the namespace karpy's "
            "Role grants Leases in (the chart's release namespace), or grant them in this one "
            "(docs/run.md); not ready, and not reconciling, until then"
        )
        self._refused_in_a_row += 1
        if why != self._refused:
            log.error("%s", why)
        else:
            log.debug("lease %s still refused (%d tries in a row)", self.lease_name, self._refused_in_a_row)
        self._refused = why

    def try_acquire_or_renew(self, deadline: float) -> bool:
        """One try, its requests bounded by ``deadline`` (monotonic); True if this replica holds the lease."""
        started = self._monotonic()
        with self._lock:
            leading, known = self._leading, self._lease
        if leading and known is not None and LeaseRecord.of(known).holder == self.identity:
            # The usual renewal: our own last write is the current object unless someone wrote since.
            renewed = self._write_record(known, started, deadline, acquire=False)
            if renewed is not None:
                return True
        try:
            lease = self._request("GET", deadline).body
        except ApiStatusError as error:
            if error.code != HTTP_NOT_FOUND:
                raise
            return self._create(started, deadline)
        record = self._observe(lease)
        ours = record.holder == self.identity
        if record.holder and not ours and not self._expired(record):
            return False
        return self._write_record(lease, started, deadline, acquire=not ours) is not None

    def _expired(self, record: LeaseRecord) -> bool:
        """Whether ``record`` has stayed unchanged for its duration, by this replica's own clock."""
        duration = record.duration_seconds or self.config.lease_duration
        return self._monotonic() >= self._observed_at + duration

    def _create(self, started: float, deadline: float) -> bool:
        now = format_micro_time(self._wall_clock())
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = self._request("POST", deadline, body, path=LEASE.collection_path(self.config.namespace))
        except ApiStatusError as error:
            if error.code == HTTP_CONFLICT:  # AlreadyExists: another candidate created it first
                return False
            raise
        self._held(created.body, started)
        return True

    def _write_record(self, lease: JSON, started: float, deadline: float, *, acquire: bool) -> JSON | None:
        """PUT ``lease`` naming this replica, renewed now; the server's answer, None if it changed since."""
        record = LeaseRecord.of(lease)
        now = format_micro_time(self._wall_clock())
        body: JSON = _deep_copy(lease)
        spec = body.setdefault("spec", {})
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = self._duration_seconds
        spec["renewTime"] = now
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = record.transitions + 1
        try:
            written = self._request("PUT", deadline, body).body
        except ApiStatusError as error:
            if error.code in (HTTP_CONFLICT, HTTP_NOT_FOUND):  # written or deleted since we read it
                return None
            raise
        self._held(written, started)
        return written

    @property
    def _duration_seconds(self) -> int:
        # Whole seconds on the wire, rounded up: others never see a shorter lease than configured.
        return max(1, math.ceil(self.config.lease_duration))

    def _held(self, lease: JSON, started: float) -> None:
        self._observe(lease)
        with self._lock:
            self._leading = True
            self._renewed_at = started

    def _observe(self, lease: JSON) -> LeaseRecord:
        record = LeaseRecord.of(lease)
        now = self._monotonic()
        with self._lock:
            previous = self._observed
            self._lease = lease
            if record != previous:
                self._observed = record
                self._observed_at = now
        if record.holder != self.identity and (previous is None or previous.holder != record.holder):
            log.info("lease %s %s", self.lease_name, f"held by {record.holder}" if record.holder else "free")
        return record

    def _request(self, method: str, deadline: float, body: object = None, *, path: str = "") -> ApiResponse:
        timeout = max(MIN_REQUEST_TIMEOUT, deadline - self._monotonic())
        return self._transport.request(method, path or self._path, body=body, timeout=timeout)

    def _lose(self, why: str) -> None:
        with self._lock:
            self._leading = False
        log.warning("lost lease %s (%s): no longer leading", self.lease_name, why)
        self.lost.set()

    def release(self) -> bool:
        """Give the lease up at once if this replica holds it; True if the lease was released."""
        with self._lock:
            leading, lease = self._leading, self._lease
            self._leading = False
        if not leading or lease is None or LeaseRecord.of(lease).holder != self.identity:
            return False
        body: JSON = _deep_copy(lease)
        spec = body.setdefault("spec", {})
        spec.pop("holderIdentity", None)
        # A holder-less lease is free at once to candidates that read the holder; a one-second
        # duration makes it so (near enough) for any that only read the duration.
        spec["leaseDurationSeconds"] = 1
        spec["renewTime"] = format_micro_time(self._wall_clock())
        try:
            released = self._request("PUT", self._monotonic() + self.config.renew_deadline, body).body
        except ApiStatusError as error:
            # A conflict means someone else wrote it since: it is not ours to release any more.
            log.warning("lease %s not released: %s", self.lease_name, error)
            return False
        except Exception as error:
            log.warning("lease %s not released: %s: %s", self.lease_name, type(error).__name__, error)
            return False
        self._observe(released)
        log.info("released lease %s", self.lease_name)
        return True

    # -- the election thread ---------------------------------------------------

    def start(self) -> None:
        """Run for leadership, and renew it once won, on a thread of its own."""
        if self._thread is not None:
            raise RuntimeError("the leader elector runs once")
        log.info("running for lease %s as %s", self.lease_name, self.identity)
        self._thread = threading.Thread(target=self._run, name="karpy-leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop running (releasing the lease if held) and wait for the thread, at most ``timeout``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.config.renew_deadline if timeout is None else timeout)

    def _run(self) -> None:
        delay = 0.0
        try:
            while not self._stop.wait(delay):
                next_delay = self.tick()
                if next_delay is None:
                    return
                delay = next_delay
            self.release()
        except Exception:  # the runner must not wait for a leadership this thread will never report
            log.exception("leader election failed")
            self._lose("the election thread failed")
