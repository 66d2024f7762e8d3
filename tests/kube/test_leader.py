"""The Lease election's state machine, against an in-memory API server and hand-moved clocks.

Every candidate gets its own monotonic clock and wall clock, so the tests can
move one replica's time without the other's and give them wall clocks an
hour apart; the fake server keeps resourceVersions and answers 404 and 409
exactly where a kube-apiserver would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from karpy.kube._http import (
    HTTP_CONFLICT,
    HTTP_FORBIDDEN,
    HTTP_NOT_FOUND,
    JSON,
    ApiResponse,
    ApiStatusError,
    ApiTransport,
)
from karpy.kube.leader import (
    DEFAULT_LEASE_NAME,
    FALLBACK_NAMESPACE,
    LeaderElectionConfig,
    LeaderElector,
    LeaseRecord,
    election_config,
)
from karpy.run import Runner, RunSettings

NAMESPACE = "karpy"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{DEFAULT_LEASE_NAME}"
LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"


class FakeLeaseServer:
    """The Lease endpoints of an API server: GET, POST (create) and PUT with a resourceVersion check."""

    def __init__(self) -> None:
        self.lease: JSON | None = None
        self.version = 0
        self.requests: list[tuple[str, str]] = []
        self.down = False
        # Answer 403, as RBAC does for an identity with no Role on Leases in the namespace.
        self.forbidden = False
        # Run once just before the next write is applied (to interleave another writer).
        self.before_next_write: Callable[[], None] | None = None

    def request(self, method: str, path: str, *, body: object = None, timeout: float = 30.0) -> ApiResponse:
        assert timeout > 0
        self.requests.append((method, path))
        if self.down:
            raise ConnectionError("connection refused")
        if self.forbidden:
            raise ApiStatusError(
                HTTP_FORBIDDEN,
                "Forbidden",
                f'leases.coordination.k8s.io "{DEFAULT_LEASE_NAME}" is forbidden: User '
                '"system:serviceaccount:karpy:karpy" cannot get resource "leases" in API group '
                f'"coordination.k8s.io" in the namespace "{NAMESPACE}"',
            )
        if method == "GET":
            assert path == LEASE_PATH
            if self.lease is None:
                raise ApiStatusError(HTTP_NOT_FOUND, "NotFound", "leases not found")
            return ApiResponse(200, _copy(self.lease))
        assert isinstance(body, dict)
        hook, self.before_next_write = self.before_next_write, None
        if hook is not None:
            hook()
        if method == "POST":
            assert path == LEASES_PATH
            if self.lease is not None:
                raise ApiStatusError(HTTP_CONFLICT, "AlreadyExists", "leases already exists")
            return self._store(body, 201)
        assert method == "PUT" and path == LEASE_PATH, (method, path)
        if self.lease is None:
            raise ApiStatusError(HTTP_NOT_FOUND, "NotFound", "leases not found")
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiStatusError(HTTP_CONFLICT, "Conflict", "the object has been modified")
        return self._store(body, 200)

    def fenced(self, fence: Callable[[], None]) -> FencedView:
        return FencedView(self, fence)

    def _store(self, body: JSON, status: int) -> ApiResponse:
        self.version += 1
        stored = _copy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.lease = stored
        return ApiResponse(status, _copy(stored))

    @property
    def record(self) -> LeaseRecord:
        assert self.lease is not None
        return LeaseRecord.of(self.lease)

    def set_holder(self, holder: str) -> None:
        """Another writer (not a karpy replica) puts its name in the lease."""
        assert self.lease is not None
        body = _copy(self.lease)
        body["spec"]["holderIdentity"] = holder
        body["spec"]["renewTime"] = "2030-01-01T00:00:00.000000Z"
        self._store(body, 200)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


class FencedView:
    """The server as :meth:`ApiTransport.fenced` shows it: ``fence()`` before every write."""

    def __init__(self, server: FakeLeaseServer, fence: Callable[[], None]) -> None:
        self.server = server
        self.fence = fence

    def request(self, method: str, path: str, *, body: object = None, timeout: float = 30.0) -> ApiResponse:
        if method != "GET":
            self.fence()
        return self.server.request(method, path, body=body, timeout=timeout)

    def interrupt_streams(self) -> None:
        pass

    def close(self) -> None:
        pass


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Replica:
    """One candidate: an elector with clocks of its own."""

    def __init__(self, server: FakeLeaseServer, name: str, wall_offset: float = 0.0) -> None:
        self.clock = Clock()
        self.wall = Clock(1_700_000_000.0 + wall_offset)
        config = LeaderElectionConfig(namespace=NAMESPACE, identity=name)
        self.elector = LeaderElector(
            server, config, monotonic=self.clock, wall_clock=self.wall, jitter=lambda: 0.5
        )

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.wall.advance(seconds)

    def tick(self) -> float | None:
        return self.elector.tick()


def advance(seconds: float, *replicas: Replica) -> None:
    for replica in replicas:
        replica.advance(seconds)


# Short timings for the tests that run the election thread on the real clock; the deadline is
# generous so that a loaded machine cannot stall a renewal past it.
FAST: dict[str, Any] = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.1}


@pytest.fixture
def server() -> FakeLeaseServer:
    return FakeLeaseServer()


def test_the_first_candidate_creates_the_lease_and_leads(server: FakeLeaseServer) -> None:
    a = Replica(server, "a")
    assert a.tick() == 2.0
    assert a.elector.is_leader()
    assert a.elector.elected.is_set()
    assert server.requests == [("GET", LEASE_PATH), ("POST", LEASES_PATH)]
    assert server.lease is not None
    spec = server.lease["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2023-11-14T22:13:20.000000Z"


def test_a_second_candidate_stands_by_while_the_leader_renews(server: FakeLeaseServer) -> None:
    a, b = Replica(server, "a"), Replica(server, "b")
    a.tick()
    # The candidate retries after retry_period * (1 + 1.2 * jitter).
    assert b.tick() == pytest.approx(2.0 * (1 + 1.2 * 0.5))
    assert not b.elector.is_leader()
    assert b.elector.holder == "a"
    # Far longer than a lease duration, but the leader renews every retry period.
    for _ in range(20):
        advance(2.0, a, b)
        assert a.tick() == 2.0
        b.tick()
        assert a.elector.is_leader()
        assert not b.elector.is_leader()
    assert server.record.holder == "a"
    assert server.record.transitions == 0


def test_a_renewal_is_one_put_of_the_leaders_own_last_write(server: FakeLeaseServer) -> None:
    a = Replica(server, "a")
    a.tick()
    before = server.record
    server.requests.clear()
    advance(2.0, a)
    a.tick()
    assert server.requests == [("PUT", LEASE_PATH)]
    after = server.record
    assert after.renew_time > before.renew_time
    assert after.acquire_time == before.acquire_time
    assert after.transitions == before.transitions


def test_a_standby_takes_over_an_expired_lease_measured_on_its_own_clock(server: FakeLeaseServer) -> None:
    a, b = Replica(server, "a"), Replica(server, "b")
    a.tick()
    b.tick()  # b sees a's record now, and measures expiry from this moment
    # a dies: nobody renews. Up to the lease duration, b keeps standing by.
    advance(14.9, b)
    b.tick()
    assert not b.elector.is_leader()
    advance(0.1, b)
    b.tick()
    assert b.elector.is_leader()
    assert server.record.holder == "b"
    assert server.record.transitions == 1
    assert server.record.acquire_time == server.record.renew_time


def test_the_holders_wall_clock_is_never_trusted(server: FakeLeaseServer) -> None:
    # a's clock is an hour slow: by its renewTime the lease looks long expired to b.
    a, b = Replica(server, "a", wall_offset=-3600.0), Replica(server, "b")
    a.tick()
    b.tick()
    advance(10.0, a, b)
    b.tick()
    assert not b.elector.is_leader()
    # ... and an hour fast does not make it look valid once it has stopped changing.
    other_server = FakeLeaseServer()
    fast = Replica(other_server, "fast", wall_offset=3600.0)
    fast.tick()
    d = Replica(other_server, "d")
    d.tick()
    advance(15.0, d)
    d.tick()
    assert d.elector.is_leader()


def test_a_new_candidate_waits_a_full_lease_duration_even_for_a_long_dead_holder(
    server: FakeLeaseServer,
) -> None:
    a = Replica(server, "a")
    a.tick()
    late = Replica(server, "late")
    advance(3600.0, late)  # an hour after a's last renewal, by any clock
    late.tick()
    assert not late.elector.is_leader()
    advance(15.0, late)
    late.tick()
    assert late.elector.is_leader()


def test_two_candidates_racing_for_an_expired_lease_get_exactly_one_write(server: FakeLeaseServer) -> None:
    a, b, c = Replica(server, "a"), Replica(server, "b"), Replica(server, "c")
    a.tick()
    b.tick()
    c.tick()
    advance(15.0, b, c)
    # b and c both read the expired lease; b's takeover lands between c's read and c's write.
    server.before_next_write = lambda: (b.tick(), None)[1]
    c.tick()
    assert b.elector.is_leader()
    assert not c.elector.is_leader()
    assert server.record.holder == "b"
    assert server.record.transitions == 1
    # c now sees b's fresh record and waits for it to expire in its turn.
    advance(14.0, c)
    c.tick()
    assert not c.elector.is_leader()


def test_two_candidates_racing_to_create_the_lease(server: FakeLeaseServer) -> None:
    a, b = Replica(server, "a"), Replica(server, "b")
    server.before_next_write = lambda: (a.tick(), None)[1]
    b.tick()  # b found no lease, but a created it before b's create arrived
    assert a.elector.is_leader()
    assert not b.elector.is_leader()
    assert server.record.holder == "a"


def test_a_released_lease_is_taken_at_the_next_try(server: FakeLeaseServer) -> None:
    a, b = Replica(server, "a"), Replica(server, "b")
    a.tick()
    b.tick()
    assert a.elector.release()
    assert not a.elector.is_leader()
    assert server.record.holder == ""
    assert server.record.duration_seconds == 1
    advance(0.1, b)  # well within the lease duration b last saw
    b.tick()
    assert b.elector.is_leader()
    assert server.record.holder == "b"
    assert server.record.transitions == 1
    assert server.record.duration_seconds == 15


def test_release_does_nothing_unless_this_replica_holds_the_lease(server: FakeLeaseServer) -> None:
    a, b = Replica(server, "a"), Replica(server, "b")
    a.tick()
    b.tick()
    assert not b.elector.release()
    assert server.record.holder == "a"
    # a's lease was taken over meanwhile (a stalled): its release is refused, b keeps it.
    advance(15.0, b)
    b.tick()
    assert not a.elector.release()
    assert server.record.holder == "b"


def test_a_leader_that_cannot_renew_gives_up_at_the_renew_deadline(server: FakeLeaseServer) -> None:
    a = Replica(server, "a")
    a.tick()
    server.down = True
    for _ in range(4):  # tries at 2, 4, 6 and 8 seconds fail; still leading within the deadline
        advance(2.0, a)
        assert a.tick() == 2.0
        assert a.elector.is_leader()
    advance(1.9, a)
    assert a.elector.is_leader()
    advance(0.1, a)
    # Exactly at the deadline is_leader() is False, whether or not the election thread has noticed.
    assert not a.elector.is_leader()
    assert a.tick() is None
    assert a.elector.lost.is_set()
    server.down = False
    assert not a.elector.release()  # nothing to release: it is not leading


def test_the_renew_deadline_runs_from_the_start_of_the_last_successful_renewal(
    server: FakeLeaseServer,
) -> None:
    a = Replica(server, "a")
    a.tick()
    advance(2.0, a)
    a.tick()  # renewed at t=2
    server.down = True
    advance(9.0, a)  # t=11: 9 s after the renewal, within the deadline
    assert a.tick() == pytest.approx(1.0)  # the next try is due no later than the deadline
    assert a.elector.is_leader()
    advance(1.0, a)
    assert a.tick() is None
    assert not a.elector.is_leader()


def test_a_leader_whose_lease_someone_else_holds_stops_leading_at_once(server: FakeLeaseServer) -> None:
    a = Replica(server, "a")
    a.tick()
    server.set_holder("intruder")
    advance(2.0, a)
    assert a.tick() is None  # the renewal was refused (409), the read shows another holder
    assert not a.elector.is_leader()
    assert a.elector.lost.is_set()
    assert server.record.holder == "intruder"


def test_a_leader_whose_lease_was_deleted_creates_it_again(server: FakeLeaseServer) -> None:
    a = Replica(server, "a")
    a.tick()
    server.lease = None
    advance(2.0, a)
    assert a.tick() == 2.0
    assert a.elector.is_leader()
    assert server.record.holder == "a"


def test_requests_are_bounded_by_the_renew_deadline() -> None:
    timeouts: list[float] = []

    class Recording(FakeLeaseServer):
        def request(
            self, method: str, path: str, *, body: object = None, timeout: float = 30.0
        ) -> ApiResponse:
            timeouts.append(timeout)
            return super().request(method, path, body=body, timeout=timeout)

    server = Recording()
    a = Replica(server, "a")
    a.tick()
    assert timeouts == [10.0, 10.0]
    advance(2.0, a)
    timeouts.clear()
    a.tick()
    assert timeouts == [8.0]  # the deadline is 10 s after the start of the last renewal


def test_the_election_thread_leads_renews_and_releases_on_stop(server: FakeLeaseServer) -> None:
    fast = FAST
    a = LeaderElector(server, LeaderElectionConfig(namespace=NAMESPACE, identity="a", **fast))
    b = LeaderElector(server, LeaderElectionConfig(namespace=NAMESPACE, identity="b", **fast))
    a.start()
    assert a.wait_for_leadership(5.0)
    b.start()
    time.sleep(0.5)
    renewed = server.record.renew_time
    time.sleep(0.3)
    assert server.record.renew_time != renewed
    assert a.is_leader() and not b.is_leader()
    stopped = time.monotonic()
    a.stop()
    assert not a.is_leader()
    assert b.wait_for_leadership(5.0)
    # b tries every 0.1-0.22 s, and the released lease is free at once (not after 3 s).
    assert time.monotonic() - stopped < 1.5
    b.stop()
    assert server.record.holder == ""
    assert not a.lost.is_set() and not b.lost.is_set()


def test_the_election_thread_reports_a_lost_lease(server: FakeLeaseServer) -> None:
    fast = FAST
    a = LeaderElector(server, LeaderElectionConfig(namespace=NAMESPACE, identity="a", **fast))
    a.start()
    assert a.wait_for_leadership(5.0)
    server.down = True
    assert a.lost.wait(5.0)
    assert not a.is_leader()
    a.stop()


def test_config_refuses_timings_that_allow_two_leaders() -> None:
    with pytest.raises(ValueError, match="lease duration"):
        LeaderElectionConfig(namespace="ns", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError, match="renew deadline"):
        LeaderElectionConfig(namespace="ns", renew_deadline=2.4, retry_period=2)
    with pytest.raises(ValueError, match="namespace"):
        LeaderElectionConfig(namespace="")


def test_identity_is_the_hostname_and_a_random_suffix() -> None:
    first = LeaderElectionConfig(namespace="ns").identity
    second = LeaderElectionConfig(namespace="ns").identity
    host, _, suffix = first.partition("_")
    assert host and len(suffix) == 36
    assert first != second
    assert second.startswith(f"{host}_")


def test_settings_follow_karpenters_flags_then_environment_then_defaults(tmp_path: Path) -> None:
    no_file = tmp_path / "absent"
    config = election_config(disable=None, name=None, namespace=None, environ={}, namespace_file=no_file)
    assert config is not None
    assert (config.namespace, config.name) == (FALLBACK_NAMESPACE, "karpy-leader-election")
    assert FALLBACK_NAMESPACE == "default"  # kubectl's, out of a cluster with no namespace in the context
    # Out of a cluster: the kubeconfig context's namespace.
    config = election_config(
        disable=None,
        name=None,
        namespace=None,
        environ={},
        namespace_file=no_file,
        kubeconfig_namespace="ctx",
    )
    assert config is not None and config.namespace == "ctx"
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15.0, 10.0, 2.0)

    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("karpy-system\n")
    config = election_config(
        disable=None,
        name=None,
        namespace=None,
        environ={},
        namespace_file=namespace_file,
        kubeconfig_namespace="ctx",
    )
    assert config is not None and config.namespace == "karpy-system"  # in a pod, the pod's

    environ = {"LEADER_ELECTION_NAME": "env-name", "LEADER_ELECTION_NAMESPACE": "env-ns"}
    config = election_config(
        disable=None, name=None, namespace=None, environ=environ, namespace_file=namespace_file
    )
    assert config is not None and (config.namespace, config.name) == ("env-ns", "env-name")
    config = election_config(
        disable="false", name="flag-name", namespace="flag-ns", environ=environ, namespace_file=no_file
    )
    assert config is not None and (config.namespace, config.name) == ("flag-ns", "flag-name")

    for disabled in ({"DISABLE_LEADER_ELECTION": "true"}, {"DISABLE_LEADER_ELECTION": "1"}):
        assert election_config(disable=None, name=None, namespace=None, environ=disabled) is None
    assert election_config(disable="true", name=None, namespace=None, environ={}) is None
    # The flag wins over the environment.
    assert (
        election_config(
            disable="false",
            name=None,
            namespace=None,
            environ={"DISABLE_LEADER_ELECTION": "true"},
            namespace_file=no_file,
        )
        is not None
    )
    # An empty variable is unset.
    empty = {"DISABLE_LEADER_ELECTION": "", "LEADER_ELECTION_NAME": "", "LEADER_ELECTION_NAMESPACE": ""}
    config = election_config(disable=None, name=None, namespace=None, environ=empty, namespace_file=no_file)
    assert config is not None and (config.namespace, config.name) == (FALLBACK_NAMESPACE, DEFAULT_LEASE_NAME)
    with pytest.raises(ValueError, match="DISABLE_LEADER_ELECTION"):
        election_config(disable=None, name=None, namespace=None, environ={"DISABLE_LEADER_ELECTION": "yes"})
    with pytest.raises(ValueError, match="--disable-leader-election"):
        election_config(disable="maybe", name=None, namespace=None, environ={})


def test_the_elector_is_usable_across_threads(server: FakeLeaseServer) -> None:
    # is_leader() is asked from the reconcile thread while the election thread writes.
    fast = FAST
    a = LeaderElector(server, LeaderElectionConfig(namespace=NAMESPACE, identity="a", **fast))
    a.start()
    assert a.wait_for_leadership(5.0)
    answers: list[bool] = []

    def ask() -> None:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            answers.append(a.is_leader())

    asker = threading.Thread(target=ask)
    asker.start()
    asker.join()
    a.stop()
    assert answers and all(answers)


def test_the_runner_runs_for_the_lease_only_once_its_caches_have_synced(
    server: FakeLeaseServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = LeaderElectionConfig(namespace=NAMESPACE, identity="replica-a")
    runner = Runner(cast(ApiTransport, server), RunSettings(leader_election=config))
    # The informers never start: their caches count as synced when the test says so.
    informers_synced = [informer.synced for informer in runner.cluster._informers.values()]
    runner.cluster.start = lambda: None  # type: ignore[method-assign]
    runner.cluster.stop = lambda timeout=10.0: None  # type: ignore[method-assign]
    stop, started = threading.Event(), threading.Event()
    caplog.set_level(logging.INFO)
    thread = threading.Thread(target=runner.run, args=(stop, started))
    thread.start()
    try:
        time.sleep(1.0)
        assert server.requests == [], "the lease was sought before the caches synced"
        assert not started.is_set()
        for synced in informers_synced:
            synced.set()
        assert started.wait(10)
    finally:
        stop.set()
        thread.join(10)
    messages = [record.getMessage() for record in caplog.records]

    def first(fragment: str) -> int:
        return next(index for index, message in enumerate(messages) if fragment in message)

    assert (
        first("caches synced")
        < first("running for lease karpy/karpy-leader-election as replica-a")
        < first("acquired lease karpy/karpy-leader-election as replica-a: leading")
        < first("controllers running")
    ), messages
    assert server.record.holder == ""  # released on stop


def test_a_candidate_refused_the_lease_says_so_once_backs_off_and_recovers(
    server: FakeLeaseServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.forbidden = True
    replica = Replica(server, "a")
    caplog.set_level(logging.DEBUG)
    delays = []
    for _ in range(8):
        delay = replica.tick()
        assert delay is not None
        delays.append(delay)
        replica.advance(delay)
    assert not replica.elector.is_leader()
    refused = replica.elector.refused
    assert "namespace 'karpy'" in refused and "LEADER_ELECTION_NAMESPACE" in refused
    errors = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert [record.getMessage() for record in errors] == [refused]
    assert errors[0].levelno == logging.ERROR
    # Backing off: 2 s, then twice as late each time, up to 30 s.
    assert delays == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    server.forbidden = False
    assert replica.tick() == 2.0
    assert replica.elector.is_leader() and replica.elector.refused == ""


def test_readyz_fails_while_the_lease_is_refused(server: FakeLeaseServer) -> None:
    server.forbidden = True
    config = LeaderElectionConfig(namespace=NAMESPACE, identity="replica-a", **FAST)
    runner = Runner(cast(ApiTransport, server), RunSettings(leader_election=config))
    for informer in runner.cluster._informers.values():
        informer.synced.set()
    runner.cluster.start = lambda: None  # type: ignore[method-assign]
    runner.cluster.stop = lambda timeout=10.0: None  # type: ignore[method-assign]
    stop, started = threading.Event(), threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop, started))
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while runner.elector is None or not runner.elector.refused:
            assert time.monotonic() < deadline, "the refusal was not noticed"
            time.sleep(0.05)
        ready, why = runner.observability.health.ready()
        assert not ready and "LEADER_ELECTION_NAMESPACE" in why
        server.forbidden = False
        assert started.wait(10), "the replica did not lead once the lease was allowed"
        assert runner.observability.health.ready() == (True, "ok")
    finally:
        stop.set()
        thread.join(10)
