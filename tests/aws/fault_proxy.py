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
  calls per NodeClaim;
- **capacity reservations** (:meth:`FaultProxy.add_capacity_reservation`):
  moto has no capacity reservation API at all, so the proxy is EC2 for it:
  it answers ``DescribeCapacityReservations`` from its table (ids, and the
  ``state``, ``owner-id``, ``tag:``/``tag-key`` and ``instance-match-criteria``
  filters Karpenter sends; an unknown id is EC2's
  ``InvalidCapacityReservationId.NotFound``), remembers which launch template
  targets which reservation (``CapacityReservationTarget`` in
  ``CreateLaunchTemplate``), answers a CreateFleet override from a template
  targeting a reservation with no instances left (or of another type or zone)
  with EC2's ``ReservationCapacityExceeded``, takes one instance off the
  reservation for each instance moto launches from such a template, adds
  ``capacityReservationId`` to those instances in ``DescribeInstances`` (until
  :meth:`FaultProxy.end_capacity_reservation` ends the reservation), and
  gives the slot back on ``TerminateInstances``. A proxy rather than
  botocore's Stubber, because the provider's calls then go through the real
  SDK over HTTP like every other call of these tests, and the launch that
  consumes a reservation is moto's real CreateFleet.

Only the EC2 query protocol (form-encoded POST bodies, XML answers) is
rewritten; other services pass through untouched.
"""

from __future__ import annotations

import contextlib
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

import boto3
from botocore.exceptions import ClientError

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


@dataclass
class ReservationRecord:
    """One capacity reservation as the proxy's EC2 holds it."""

    id: str
    instance_type: str
    zone: str
    total: int
    available: int
    reservation_type: str = "default"
    interruptible: bool = False
    instance_match_criteria: str = "targeted"
    owner_id: str = "123456789012"
    end: float | None = None  # seconds since the epoch
    state: str = "active"
    tags: dict[str, str] = field(default_factory=dict)

    def matches(self, filters: dict[str, list[str]]) -> bool:
        for name, values in filters.items():
            if name == "state" and self.state not in values:
                return False
            if name == "owner-id" and self.owner_id not in values:
                return False
            if name == "instance-match-criteria" and self.instance_match_criteria not in values:
                return False
            if name == "tag-key" and not set(values) & set(self.tags):
                return False
            if name.startswith("tag:") and self.tags.get(name.removeprefix("tag:")) not in values:
                return False
        return True

    def xml(self) -> str:
        end = (
            "<endDate>" + time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(self.end)) + "</endDate>"
            if self.end is not None
            else ""
        )
        tags = "".join(
            f"<item><key>{escape(key)}</key><value>{escape(value)}</value></item>"
            for key, value in self.tags.items()
        )
        return (
            f"<item><capacityReservationId>{self.id}</capacityReservationId><ownerId>{self.owner_id}</ownerId>"
            f"<instanceType>{self.instance_type}</instanceType><availabilityZone>{self.zone}</availabilityZone>"
            f"<totalInstanceCount>{self.total}</totalInstanceCount>"
            f"<availableInstanceCount>{self.available}</availableInstanceCount><state>{self.state}</state>{end}"
            f"<instanceMatchCriteria>{self.instance_match_criteria}</instanceMatchCriteria>"
            f"<reservationType>{self.reservation_type}</reservationType>"
            f"<interruptible>{'true' if self.interruptible else 'false'}</interruptible>"
            f"<tagSet>{tags}</tagSet></item>"
        )


def _error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
        f"<Code>{code}</Code><Message>{escape(message)}</Message>"
        f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self._lock = threading.Lock()
        self._reservation_launches = threading.Lock()
        self._capacity: list[CapacityRule] = []
        self._throttles: list[ThrottleRule] = []
        self._delays: dict[str, float] = {}
        self._delays_after: dict[str, float] = {}
        self.calls: list[Call] = []
        # Capacity reservations: the table, the templates that target one, the instances in one.
        self.reservations: dict[str, ReservationRecord] = {}
        self._template_targets: dict[str, str] = {}
        self.reserved_instances: dict[str, str] = {}
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

    def add_capacity_reservation(
        self, reservation_id: str, instance_type: str, zone: str, count: int, **more: object
    ) -> ReservationRecord:
        """A reservation of ``count`` instances; ``more``: the other fields of :class:`ReservationRecord`."""
        record = ReservationRecord(reservation_id, instance_type, zone, count, count, **more)  # type: ignore[arg-type]
        with self._lock:
            self.reservations[reservation_id] = record
        return record

    def end_capacity_reservation(self, reservation_id: str, state: str = "cancelled") -> None:
        """The reservation ends (``cancelled`` or ``expired``), as EC2 ends an On-Demand Capacity
        Reservation: its instances keep running as plain on-demand ones and DescribeInstances no
        longer names it on them; DescribeCapacityReservations lists it in ``state``."""
        with self._lock:
            self.reservations[reservation_id].state = state
            self.reservations[reservation_id].available = 0
            for instance_id in [i for i, r in self.reserved_instances.items() if r == reservation_id]:
                del self.reserved_instances[instance_id]

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
            self.reservations.clear()
            self._template_targets.clear()
            self.reserved_instances.clear()

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
        if call.action == "DescribeCapacityReservations":
            status, answer = self._describe_reservations(form)
            self._answer(request, status, answer)
            return
        if call.action == "CreateLaunchTemplate":
            target = form.get(
                "LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
            )
            if target:
                with self._lock:
                    self._template_targets[form.get("LaunchTemplateName", "")] = target
        if call.action == "TerminateInstances":
            self._free_reserved(form)
        # EC2 takes a reservation's room as it launches; the check before forwarding and the count
        # after must not interleave with another launch, or two fleets would share its last slot.
        launching = (
            self._reservation_launches
            if call.action == "CreateFleet" and self.reservations
            else contextlib.nullcontext()
        )
        with launching:
            errors = ""
            reserved: dict[int, str] = {}
            if call.action == "CreateFleet":
                form, reserved, reservation_errors = self._refuse_reserved(form)
                form, errors = self._refuse(form)
                errors = reservation_errors + errors
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
            if call.action == "CreateFleet" and reserved and status == 200:
                self._take_reserved(answer.decode(), reserved)
            if call.action == "DescribeInstances" and status == 200:
                answer = self._with_reservation_ids(answer.decode()).encode()
            if delay_after:
                time.sleep(delay_after)
            if errors and status == 200:
                answer = _with_errors(answer.decode(), errors).encode()
            self._answer(request, status, answer, headers)

    # -- capacity reservations ----------------------------------------------

    def _describe_reservations(self, form: dict[str, str]) -> tuple[int, bytes]:
        ids = [value for key, value in form.items() if key.startswith("CapacityReservationId.")]
        filters: dict[str, list[str]] = {}
        for key, value in form.items():
            match = re.match(r"^Filter\.(\d+)\.Name$", key)
            if match:
                prefix = f"Filter.{match[1]}.Value."
                filters[value] = [v for k, v in form.items() if k.startswith(prefix)]
        with self._lock:
            missing = [reservation_id for reservation_id in ids if reservation_id not in self.reservations]
            if missing:
                return 400, _error_body(
                    "InvalidCapacityReservationId.NotFound",
                    f"The capacity reservation ID '{missing[0]}' does not exist",
                )
            chosen = [
                record
                for record in self.reservations.values()
                if (not ids or record.id in ids) and record.matches(filters)
            ]
            items = "".join(record.xml() for record in chosen)
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<DescribeCapacityReservationsResponse xmlns="{EC2_XMLNS}">'
            f"<requestId>{uuid.uuid4()}</requestId><capacityReservationSet>{items}</capacityReservationSet>"
            "</DescribeCapacityReservationsResponse>"
        )
        return 200, xml.encode()

    def _refuse_reserved(self, form: dict[str, str]) -> tuple[dict[str, str], dict[int, str], str]:
        """Overrides of templates targeting a reservation without room become ReservationCapacityExceeded.

        Returns the form without them, the configs (by number) still targeting a reservation, and the
        errorSet items.
        """
        configs: dict[int, str] = {}
        for key, value in form.items():
            match = re.match(
                r"^LaunchTemplateConfigs\.(\d+)\.LaunchTemplateSpecification\.LaunchTemplateName$", key
            )
            if match and (target := self._target_of(value)):
                configs[int(match[1])] = target
        with self._lock:
            records = dict(self.reservations)
        if not configs:
            return form, {}, ""
        kept: dict[str, str] = {}
        overrides: dict[tuple[int, int], dict[str, str]] = {}
        for key, value in form.items():
            match = _OVERRIDE.match(key)
            if match and int(match[1]) in configs:
                overrides.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
            else:
                kept[key] = value
        items = []
        remaining: dict[int, list[dict[str, str]]] = {}
        for (config, _index), override in sorted(overrides.items()):
            record = records.get(configs[config])
            fits = (
                record is not None
                and record.available > 0
                and record.state == "active"
                and override.get("InstanceType") == record.instance_type
                and override.get("AvailabilityZone", record.zone) == record.zone
            )
            if fits:
                remaining.setdefault(config, []).append(override)
                continue
            prefix = f"LaunchTemplateConfigs.{config}.LaunchTemplateSpecification."
            template = {k.removeprefix(prefix): v for k, v in form.items() if k.startswith(prefix)}
            items.append(_error_item(override, template, "on-demand", "ReservationCapacityExceeded"))
        for config, left in remaining.items():
            for index, override in enumerate(left, start=1):
                for name, value in override.items():
                    kept[f"LaunchTemplateConfigs.{config}.Overrides.{index}.{name}"] = value
        return kept, {config: configs[config] for config in remaining}, "".join(items)

    def _target_of(self, template: str) -> str:
        """The reservation a launch template targets ("" for none), asking moto for one made before."""
        with self._lock:
            if template in self._template_targets:
                return self._template_targets[template]
        if not self.reservations:
            return ""
        ec2 = boto3.session.Session().client(
            "ec2", endpoint_url=f"http://{self.upstream_host}:{self.upstream_port}"
        )
        try:
            versions = ec2.describe_launch_template_versions(
                LaunchTemplateName=template, Versions=["$Latest"]
            )
        except ClientError:
            return ""
        data = (
            versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]
            if versions["LaunchTemplateVersions"]
            else {}
        )
        target = str(
            data.get("CapacityReservationSpecification", {})
            .get("CapacityReservationTarget", {})
            .get("CapacityReservationId", "")
        )
        with self._lock:
            self._template_targets[template] = target
        return target

    def _take_reserved(self, xml: str, reserved: dict[int, str]) -> None:
        """Each instance moto launched from a template targeting a reservation takes one of its instances."""
        launched = re.findall(r"<instanceIds>\s*<item>([^<]+)</item>", xml)
        if not launched:
            return
        # karpy asks for one instance; moto launches the first override of the first config.
        reservation_id = reserved[min(reserved)]
        with self._lock:
            record = self.reservations.get(reservation_id)
            for instance_id in launched:
                if record is not None and record.available > 0:
                    record.available -= 1
                    self.reserved_instances[instance_id] = reservation_id

    def _free_reserved(self, form: dict[str, str]) -> None:
        ids = [value for key, value in form.items() if key.startswith("InstanceId.")]
        with self._lock:
            for instance_id in ids:
                reservation_id = self.reserved_instances.pop(instance_id, None)
                record = self.reservations.get(reservation_id or "")
                if record is not None:
                    record.available = min(record.total, record.available + 1)

    def _with_reservation_ids(self, xml: str) -> str:
        with self._lock:
            reserved = dict(self.reserved_instances)
        for instance_id, reservation_id in reserved.items():
            xml = xml.replace(
                f"<instanceId>{instance_id}</instanceId>",
                f"<instanceId>{instance_id}</instanceId><capacityReservationId>{reservation_id}</capacityReservationId>",
            )
        return xml

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
