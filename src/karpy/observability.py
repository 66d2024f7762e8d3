"""What ``karpy run`` shows of itself over HTTP: ``/metrics``, ``/healthz`` and ``/readyz``.

A controller in a cluster is watched by three readers, each with one
question, and Karpenter answers each on a port of its own, so karpy does too:

- **Prometheus** scrapes ``/metrics`` on the metrics port (``METRICS_PORT``,
  8080 by default, as in Karpenter): the registry of
  :mod:`karpy.operator.karpenter_metrics` in the text exposition format.
- **The kubelet's liveness probe** asks ``/healthz`` on the health probe port
  (``HEALTH_PROBE_PORT``, 8081): is the process alive and its reconcile loop
  still turning? The loop reports each turn (:meth:`Health.beat`); if none
  came for ``stall_timeout`` seconds (two minutes by default: far longer than
  any reconcile should take, short enough that a deadlocked process is
  restarted), the answer is 500 and the kubelet restarts the container. Before
  the loop's first turn (the caches are still listing) the process counts as
  alive: a slow first list is the readiness probe's business.
- **The kubelet's readiness probe** asks ``/readyz`` on the same port: are the
  informer caches synced, and can this replica take part in leader election
  (the API server does not refuse it the Lease)? Until both, 500 and why. A
  standby that may read and write the Lease is ready: it can take over.

Both ports may be the same number, in which case one server answers all
three paths; port 0 picks a free port (tests read it back from
:attr:`Endpoints.metrics_port` and :attr:`Endpoints.health_probe_port`).

The servers are the standard library's threading HTTP server, each in a
daemon thread of its own, so a slow scraper never holds up the reconcile
loop: the loop never waits for them, and a scrape only takes the registry's
lock for as long as rendering takes. The body of a scrape is sent from the
registry's pieces, a few tens of KB at a time, and never put together whole
(:mod:`karpy.operator.metrics` says why). Requests are logged at debug level.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase

from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.metrics import CONTENT_TYPE, Registry

log = logging.getLogger("karpy.http")

DEFAULT_STALL_TIMEOUT = 120.0

# A body is bytes, or pieces of it sent one after the other (a scrape's, see Endpoints._metrics).
Response = tuple[int, str, bytes | list[bytes]]
Route = Callable[[], Response]
# The most of a body written at once: the pieces of a scrape are joined up to this size.
WRITE_SIZE = 64 * 1024


@dataclass(frozen=True, slots=True)
class ObservabilitySettings:
    # None: no endpoint. ``karpy run`` serves both by default; the Python API serves none unless asked.
    metrics_port: int | None = None
    health_probe_port: int | None = None
    # The address to listen on; empty for every interface, as Karpenter binds.
    bind_address: str = ""
    # Seconds without a loop turn after which /healthz fails.
    stall_timeout: float = DEFAULT_STALL_TIMEOUT


class Health:
    """Liveness from the loop's heartbeats, readiness from a check (the caches' sync)."""

    def __init__(
        self,
        ready: Callable[[], bool],
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        blocked: Callable[[], str] | None = None,
    ) -> None:
        self._ready = ready
        # Why the process cannot do its part even with its caches synced ("" when it can).
        self._blocked = blocked
        self.stall_timeout = stall_timeout
        self._clock = clock
        self._last_beat: float | None = None

    def beat(self) -> None:
        """The loop turned (a float store: safe to read from the HTTP threads)."""
        self._last_beat = self._clock()

    def alive(self) -> tuple[bool, str]:
        last = self._last_beat
        if last is None:
            return True, "ok: starting"
        stalled = self._clock() - last
        if stalled > self.stall_timeout:
            return False, f"reconcile loop stalled for {stalled:.0f}s (limit {self.stall_timeout:g}s)"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if not self._ready():
            return False, "informer caches not synced"
        blocked = self._blocked() if self._blocked is not None else ""
        if blocked:
            return False, blocked
        return True, "ok"


def _text(check: Callable[[], tuple[bool, str]]) -> Route:
    def respond() -> Response:
        ok, message = check()
        return (200 if ok else 500), "text/plain; charset=utf-8", (message + "\n").encode()

    return respond


def _handler(routes: dict[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "karpy"

        def _respond(self, *, body: bool) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            payload: bytes | list[bytes]
            if route is None:
                status, content_type, payload = 404, "text/plain; charset=utf-8", b"not found\n"
            else:
                status, content_type, payload = route()
            pieces = [payload] if isinstance(payload, bytes) else payload
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(sum(map(len, pieces))))
            self.end_headers()
            if body:
                _write(self.wfile, pieces)

        def do_GET(self) -> None:
            self._respond(body=True)

        def do_HEAD(self) -> None:
            self._respond(body=False)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


def _write(out: BufferedIOBase, pieces: list[bytes]) -> None:
    """Send ``pieces`` in writes of about :data:`WRITE_SIZE` bytes (one per piece would be a system
    call per series; all joined, a copy of the whole body)."""
    batch: list[bytes] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= WRITE_SIZE:
            out.write(b"".join(batch))
            batch.clear()
            size = 0
    if batch:
        out.write(b"".join(batch))


class _Server:
    def __init__(self, address: str, port: int, routes: dict[str, Route], name: str) -> None:
        self.httpd = ThreadingHTTPServer((address, port), _handler(routes))
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class Endpoints:
    """The HTTP servers for metrics and probes (one when both ports are the same)."""

    def __init__(self, registry: Registry, health: Health, settings: ObservabilitySettings) -> None:
        self.registry = registry
        self.health = health
        self.settings = settings
        self._servers: list[_Server] = []
        self.metrics_port: int | None = None
        self.health_probe_port: int | None = None

    def _metrics(self) -> Response:
        # Not the body in one piece: a scrape at 10,000 pods is 15 MB, and a 15 MB string freed by
        # each of the short-lived threads that serve scrapes, in glibc's malloc arena of that thread
        # (shared with the informers' and workers'), stayed resident: hundreds of MB after a few
        # dozen scrapes (benchmarks/metrics_scrape.py).
        return 200, CONTENT_TYPE, self.registry.exposition_pieces()

    def start(self) -> None:
        settings = self.settings
        metrics_routes: dict[str, Route] = {"/metrics": self._metrics}
        probe_routes: dict[str, Route] = {
            "/healthz": _text(self.health.alive),
            "/readyz": _text(self.health.ready),
        }
        try:
            if settings.metrics_port is not None and settings.metrics_port == settings.health_probe_port != 0:
                server = self._serve(settings.metrics_port, {**metrics_routes, **probe_routes}, "karpy-http")
                self.metrics_port = self.health_probe_port = server.port
                return
            if settings.metrics_port is not None:
                self.metrics_port = self._serve(settings.metrics_port, metrics_routes, "karpy-metrics").port
            if settings.health_probe_port is not None:
                self.health_probe_port = self._serve(
                    settings.health_probe_port, probe_routes, "karpy-probes"
                ).port
        except BaseException:
            self.stop()
            raise

    def _serve(self, port: int, routes: dict[str, Route], name: str) -> _Server:
        try:
            server = _Server(self.settings.bind_address, port, routes, name)
        except OSError as error:
            # The port in use, or an address not this host's: said with the port and what it is for.
            reason = error.strerror or str(error)
            raise OSError(
                error.errno,
                f"cannot serve {', '.join(sorted(routes))} on port {port}: {reason[:1].lower()}{reason[1:]}",
            ) from error
        server.start()
        self._servers.append(server)
        log.info("serving %s on port %d", ", ".join(sorted(routes)), server.port)
        return server

    def stop(self) -> None:
        for server in self._servers:
            server.stop()
        self._servers.clear()


class RunObservability:
    """Metrics, health and their endpoints, as :class:`karpy.run.Runner` wires them."""

    def __init__(
        self,
        settings: ObservabilitySettings,
        synced: Callable[[], bool],
        blocked: Callable[[], str] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = Registry()
        self.metrics = Metrics(self.registry)
        self.health = Health(synced, settings.stall_timeout, blocked=blocked)
        self.endpoints = Endpoints(self.registry, self.health, settings)

    def start(self) -> None:
        self.endpoints.start()

    def stop(self) -> None:
        self.endpoints.stop()

    def turn(self, synced: bool) -> None:
        """One turn of the reconcile loop: a heartbeat, and whether the caches are synced."""
        self.health.beat()
        self.metrics.cluster_state(synced, time.monotonic())
