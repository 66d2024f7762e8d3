"""A loopback HTTP proxy in front of moto that injects what real AWS does and moto does not.

moto launches the first override of a CreateFleet call, never runs out of
capacity, never throttles and answers at once. EC2 does all of that, and the
AWS provider's handling of it is what the tests must see. The proxy forwards
every request to the upstream endpoint unchanged, except what its rules say:

- **capacity** (:meth:`FaultProxy.refuse_capacity`): CreateFleet overrides of
  the chosen offerings (instance type, zone, capacity type; ``*`` matches
  any) are taken out of the request before it is forwarded and answered as
  errors in the response's ``errorSet``, in EC2's XML shape, with HTTP 200;
  when no override remains, the proxy answers alone: 200 with only the
  ``errorSet``, as EC2 does when nothing could be launched;
- **throttling** (:meth:`FaultProxy.throttle`): the first ``n`` calls of an
  action get 503 with EC2's ``RequestLimitExceeded`` error document (or
  every call while a rate is exceeded);
- **latency** (:meth:`FaultProxy.delay`): seconds added before an action is
  forwarded (the server is threaded, so concurrent calls wait concurrently);
- **a call log** (:attr:`FaultProxy.calls`): the action of every request and,
  for CreateFleet, the ``karpenter.sh/nodeclaim`` tag value, so tests count
  calls per NodeClaim.

Only the EC2 query protocol (form-encoded POST bodies, XML answers) is
rewritten; other services pass through untouched.
"""

from __future__ import annotations

import fnmatch
import http.client
import re
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit
from xml.sax.saxutils import escape

NODECLAIM_TAG = "karpenter.sh/nodeclaim"
EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
_OVERRIDE = re.compile(r"^LaunchTemplateConfigs\.(\d+)\.Overrides\.(\d+)\.(.+)$")


class _QuietServer(ThreadingHTTPServer):
    """A server that does not print a traceback when a caller hangs up (karpy killed mid-call)."""

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass
class Call:
    action: str
    nodeclaim: str = ""  # CreateFleet: the karpenter.sh/nodeclaim tag of the request
    status: int = 200
    started: float = 0.0  # time.monotonic() when the request arrived
    finished: float = 0.0  # and when its answer was sent (0 while in flight)
    refused: bool = False  # CreateFleet: some offerings were answered with capacity errors

    @property
    def throttled(self) -> bool:
        return self.status == 503


@dataclass
class CapacityRule:
    instance_type: str
    zone: str
    capacity_type: str
    code: str

    def matches(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        return (
            fnmatch.fnmatchcase(instance_type, self.instance_type)
            and fnmatch.fnmatchcase(zone, self.zone)
            and fnmatch.fnmatchcase(capacity_type, self.capacity_type)
        )


@dataclass
class ThrottleRule:
    action: str
    first: int = 0  # throttle the first n calls
    per_second: float = 0.0  # or every call beyond this rate
    seen: int = 0
    window: list[float] = field(default_factory=list)

    def throttles(self, now: float) -> bool:
        self.seen += 1
        if self.first and self.seen <= self.first:
            return True
        if self.per_second:
            self.window = [moment for moment in self.window if moment > now - 1.0]
            if len(self.window) >= self.per_second:
                return True
            self.window.append(now)
        return False


def _throttled_body() -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
        "<Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>"
        f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


def _error_item(override: dict[str, str], template: dict[str, str], capacity_type: str, code: str) -> str:
    spec = "".join(
        f"<{tag}>{escape(template[key])}</{tag}>"
        for key, tag in (
            ("LaunchTemplateName", "launchTemplateName"),
            ("LaunchTemplateId", "launchTemplateId"),
            ("Version", "version"),
        )
        if key in template
    )
    overrides = "".join(
        f"<{tag}>{escape(override[key])}</{tag}>"
        for key, tag in (
            ("InstanceType", "instanceType"),
            ("SubnetId", "subnetId"),
            ("AvailabilityZone", "availabilityZone"),
            ("ImageId", "imageId"),
        )
        if key in override
    )
    return (
        "<item><launchTemplateAndOverrides>"
        f"<launchTemplateSpecification>{spec}</launchTemplateSpecification>"
        f"<overrides>{overrides}</overrides>"
        f"</launchTemplateAndOverrides><lifecycle>{capacity_type}</lifecycle>"
        f"<errorCode>{code}</errorCode>"
        f"<errorMessage>There is no {escape(capacity_type)} capacity for "
        f"{escape(override.get('InstanceType', ''))} in {escape(override.get('AvailabilityZone', ''))} "
        "(injected by the test proxy).</errorMessage></item>"
    )


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self._lock = threading.Lock()
        self._capacity: list[CapacityRule] = []
        self._throttles: list[ThrottleRule] = []
        self._delays: dict[str, float] = {}
        self._delays_after: dict[str, float] = {}
        self.calls: list[Call] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- rules --------------------------------------------------------------

    def refuse_capacity(
        self,
        instance_type: str = "*",
        zone: str = "*",
        capacity_type: str = "*",
        code: str = "InsufficientInstanceCapacity",
    ) -> None:
        with self._lock:
            self._capacity.append(CapacityRule(instance_type, zone, capacity_type, code))

    def throttle(self, action: str, *, first: int = 0, per_second: float = 0.0) -> None:
        with self._lock:
            self._throttles.append(ThrottleRule(action, first, per_second))

    def delay(self, action: str, seconds: float, *, after_upstream: bool = False) -> None:
        """Answer ``action`` ``seconds`` late: before forwarding it, or after (the call took effect)."""
        with self._lock:
            (self._delays_after if after_upstream else self._delays)[action] = seconds

    def reset(self) -> None:
        with self._lock:
            self._capacity.clear()
            self._throttles.clear()
            self._delays.clear()
            self._delays_after.clear()
            self.calls.clear()

    # -- the call log ------------------------------------------------------

    def count(self, action: str) -> int:
        with self._lock:
            return sum(1 for call in self.calls if call.action == action)

    def fleets_per_nodeclaim(self) -> Counter[str]:
        """CreateFleet calls forwarded or answered, per NodeClaim tag (throttled ones included)."""
        with self._lock:
            return Counter(call.nodeclaim for call in self.calls if call.action == "CreateFleet")

    # -- serving -----------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_DELETE = do_HEAD = do_POST  # noqa: N815

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        form = dict(parse_qsl(body.decode(), keep_blank_values=True)) if body else {}
        action = form.get("Action", "")
        with self._lock:
            delay = self._delays.get(action, 0.0)
            delay_after = self._delays_after.get(action, 0.0)
            throttled = any(
                rule.throttles(time.monotonic()) for rule in self._throttles if rule.action == action
            )
            call = Call(action, _nodeclaim_tag(form), 503 if throttled else 200, started=time.monotonic())
            self.calls.append(call)
        try:
            self._serve(request, call, body, form, delay, delay_after)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller went away while waiting (a test killed karpy mid-call): nobody to answer
        finally:
            call.finished = time.monotonic()

    def _serve(
        self,
        request: BaseHTTPRequestHandler,
        call: Call,
        body: bytes,
        form: dict[str, str],
        delay: float,
        delay_after: float,
    ) -> None:
        if delay:
            time.sleep(delay)
        if call.throttled:
            self._answer(request, 503, _throttled_body())
            return
        errors = ""
        if call.action == "CreateFleet":
            form, errors = self._refuse(form)
            call.refused = bool(errors)
            if errors and not any(_OVERRIDE.match(key) for key in form):
                # Nothing left to launch: EC2 answers 200 with the errors only.
                xml = (
                    f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{EC2_XMLNS}">'
                    f"<requestId>{uuid.uuid4()}</requestId><fleetId>fleet-{uuid.uuid4().hex[:17]}</fleetId>"
                    f"<errorSet>{errors}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
                )
                self._answer(request, 200, xml.encode())
                return
            body = urlencode(form).encode()
        status, headers, answer = self._forward(request, body)
        if delay_after:
            time.sleep(delay_after)
        if errors and status == 200:
            answer = _with_errors(answer.decode(), errors).encode()
        self._answer(request, status, answer, headers)

    def _refuse(self, form: dict[str, str]) -> tuple[dict[str, str], str]:
        """The form without the refused overrides (renumbered), and their errorSet items."""
        capacity_type = form.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
        overrides: dict[tuple[int, int], dict[str, str]] = {}
        rest: dict[str, str] = {}
        for key, value in form.items():
            match = _OVERRIDE.match(key)
            if match:
                overrides.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
            else:
                rest[key] = value
        with self._lock:
            rules = list(self._capacity)
        items = []
        kept: dict[int, list[dict[str, str]]] = {}
        for (config, _index), override in sorted(overrides.items()):
            rule = next(
                (
                    rule
                    for rule in rules
                    if rule.matches(
                        override.get("InstanceType", ""), override.get("AvailabilityZone", ""), capacity_type
                    )
                ),
                None,
            )
            if rule is None:
                kept.setdefault(config, []).append(override)
                continue
            prefix = f"LaunchTemplateConfigs.{config}.LaunchTemplateSpecification."
            template = {k.removeprefix(prefix): v for k, v in form.items() if k.startswith(prefix)}
            items.append(_error_item(override, template, capacity_type, rule.code))
        for config, remaining in kept.items():
            for index, override in enumerate(remaining, start=1):
                for name, value in override.items():
                    rest[f"LaunchTemplateConfigs.{config}.Overrides.{index}.{name}"] = value
        return rest, "".join(items)

    def _forward(
        self, request: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        headers = {
            key: value
            for key, value in request.headers.items()
            if key.lower() not in ("content-length", "connection", "transfer-encoding")
        }
        headers["Content-Length"] = str(len(body))
        try:
            connection.request(request.command, request.path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            kept = [
                (key, value)
                for key, value in response.getheaders()
                if key.lower() not in ("content-length", "connection", "transfer-encoding")
            ]
            return response.status, kept, answer
        finally:
            connection.close()

    @staticmethod
    def _answer(
        request: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        request.send_response(status)
        for key, value in headers or [("Content-Type", "text/xml")]:
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(body)


def _nodeclaim_tag(form: dict[str, str]) -> str:
    for key, value in form.items():
        if key.startswith("TagSpecification.") and key.endswith(".Key") and value == NODECLAIM_TAG:
            return form.get(key.removesuffix(".Key") + ".Value", "")
    return ""


def _with_errors(xml: str, items: str) -> str:
    """The CreateFleet answer with ``items`` in its errorSet (made if moto sent none)."""
    if "<errorSet/>" in xml:
        return xml.replace("<errorSet/>", f"<errorSet>{items}</errorSet>", 1)
    if "<errorSet>" in xml:
        return xml.replace("<errorSet>", f"<errorSet>{items}", 1)
    return xml.replace("</CreateFleetResponse>", f"<errorSet>{items}</errorSet></CreateFleetResponse>", 1)
