"""The HTTP edge of the real-cluster adapter: bytes in, plain dicts out.

lightkube knows how to reach an API server from a kubeconfig (the server's
address, its CA, client certificates, tokens and exec plugins), and that is
all karpy takes from it: the connection. Requests are built by hand on the
HTTP client lightkube configured, and bodies are encoded and decoded with
orjson into plain dicts, for three reasons:

- karpy's records are parsed from plain mappings (``karpy.api``'s parsers read
  YAML and the API server's JSON alike), so decoding into lightkube's model
  classes first would only be a detour that costs time and memory on every
  pod of a large cluster;
- the CRD kinds (NodeClaim, NodePool, the node classes) need no generated
  resource classes this way, and the same code lists and watches all kinds;
- keeping the server's own dict of each object is what lets the adapter write
  minimal patches for objects it does not own (see ``_encode``).

lightkube has no type stubs, so every untyped call is wrapped here in a small
function with a precise signature, and nothing else in ``karpy.kube`` touches
lightkube's client objects.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import socket
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ConfigError

JSON = dict[str, Any]

CONTENT_JSON = "application/json"
CONTENT_MERGE_PATCH = "application/merge-patch+json"

HTTP_BAD_REQUEST = 400
HTTP_FORBIDDEN = 403
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_GONE = 410
HTTP_UNPROCESSABLE = 422
HTTP_TOO_MANY_REQUESTS = 429

# Seconds to wait for an ordinary request (a write, a page of a list).
REQUEST_TIMEOUT = 30.0


class ApiStatusError(Exception):
    """The API server answered with an error status (or a watch sent an ERROR event)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        causes: tuple[str, ...] = (),
        fields: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        # The types of the Status's details.causes (e.g. "NamespaceTerminating"),
        # which the JSON calls "reason".
        self.causes = causes
        # The causes that name a field: (field, message), as a 422 Invalid lists them.
        self.fields = fields


def decode_json(content: bytes) -> JSON:
    value = orjson.loads(content) if content else {}
    return value if isinstance(value, dict) else {}


def status_error(code: int, content: bytes) -> ApiStatusError:
    """An error from a response body, which is a metav1.Status when the server wrote it."""
    try:
        status = decode_json(content)
    except orjson.JSONDecodeError:
        status = {}
    message = status.get("message")
    reason = status.get("reason")
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return ApiStatusError(
        int(status.get("code") or code),
        reason if isinstance(reason, str) else "",
        message if isinstance(message, str) else content[:200].decode(errors="replace"),
        tuple(
            str(cause["reason"])
            for cause in causes or ()
            if isinstance(cause, dict) and isinstance(cause.get("reason"), str)
        ),
        tuple(
            (str(cause["field"]), str(cause.get("message") or ""))
            for cause in causes or ()
            if isinstance(cause, dict) and isinstance(cause.get("field"), str) and cause["field"]
        ),
    )


@dataclass(frozen=True, slots=True)
class ApiResponse:
    status: int
    body: JSON


class KubeconfigError(Exception):
    """No usable kubeconfig or in-cluster configuration."""


# The methods that change something on the server: the ones a fence stands before.
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def kubeconfig_namespace(path: str | Path | None = None) -> str | None:
    """The namespace of the current context of the configuration ``from_kubeconfig`` would use.

    In a pod, the pod's namespace; else the context's ``namespace``, None when
    it names none (or the configuration cannot be read: ``from_kubeconfig``
    says why when it is used).
    """
    try:
        config = KubeConfig.from_file(path) if path is not None else KubeConfig.from_env()
        current = config.get()
    except Exception:  # any unreadable configuration: said later, by from_kubeconfig
        return None
    context = getattr(current, "context", None)
    namespace = getattr(context, "namespace", None)
    return namespace if isinstance(namespace, str) and namespace else None


class LineStream:
    """The lines of one open stream, and a way to end it from another thread."""

    def __init__(self, lines: Iterator[bytes], interrupt: Callable[[], None]) -> None:
        self._lines = lines
        self._interrupt = interrupt

    def __iter__(self) -> Iterator[bytes]:
        return self._lines

    def interrupt(self) -> None:
        """End the stream: the thread reading it gets an error (or the end) at once."""
        self._interrupt()


def _gunzip_members(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The bytes of a gzip stream of one or more members (RFC 1952 allows several, as Go reads them)."""
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    for chunk in chunks:
        rest = chunk
        while rest:
            data = decoder.decompress(rest)
            if data:
                yield data
            if not decoder.eof:
                break
            rest = decoder.unused_data  # the next member starts here
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Lines (without their newline) of a byte stream; a last line without one too."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from complete
    if pending:
        yield pending


def _shut(response: Any) -> None:
    # Closing a response does not wake a thread blocked reading its socket;
    # shutting the socket down does.
    with contextlib.suppress(Exception):
        network_stream = response.extensions.get("network_stream")
        sock = network_stream.get_extra_info("socket") if network_stream is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        response.close()


def _ca_bundle(config: KubeConfig) -> str:
    """The CA of the configuration's current cluster as base64-encoded PEM, as Karpenter discovers it.

    Karpenter gives nodes, and hashes into the EC2NodeClass hash, the CA of its own
    connection when ``CLUSTER_CA_BUNDLE`` is unset; "" when it names none or cannot be read.
    """
    try:
        current = config.get()
        if current is None:
            return ""
        cluster = current.cluster
        if cluster.certificate_auth_data:
            pem = base64.b64decode(cluster.certificate_auth_data)
        elif cluster.certificate_auth:
            pem = Path(current.abs_file(cluster.certificate_auth)).read_bytes()
        else:
            return ""
    except (ConfigError, OSError, ValueError, AttributeError, TypeError):
        return ""
    return base64.b64encode(pem).decode()


class ApiTransport:
    """Requests to one API server, over the HTTP client lightkube configures from a kubeconfig."""

    def __init__(self, client: Client, ca_bundle: str = "") -> None:
        self._lightkube = client
        # The CA the connection trusts, base64-encoded PEM ("" : none named).
        self.ca_bundle = ca_bundle
        # lightkube's sync client keeps its configured HTTP client as ``_client._client``.
        self._http: Any = client._client._client
        self._open_streams: set[Any] = set()
        self._streams_lock = threading.Lock()
        self._fence: Callable[[], None] | None = None

    def fenced(self, fence: Callable[[], None]) -> ApiTransport:
        """This transport's connection, with ``fence()`` called before every write it sends.

        ``fence`` raises to refuse the write (``karpy run`` passes the leader
        elector's check); reads and watches pass unchecked. The two share the
        connection pool and the open streams, so closing either closes both; the
        elector keeps the unfenced one, as the lease is the one write a replica
        makes to become (or stay) the leader.
        """
        twin = copy.copy(self)
        twin._fence = fence
        return twin

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None) -> ApiTransport:
        """The transport of the kubeconfig at ``path``, else ``$KUBECONFIG``, else in-cluster.

        A missing or unreadable configuration is :class:`KubeconfigError`: the
        operator's mistake, told in one line, not a traceback from lightkube.
        """
        try:
            config = KubeConfig.from_file(path) if path is not None else KubeConfig.from_env()
        # lightkube reads a file with no mapping or no "clusters" as AttributeError or KeyError.
        except (
            ConfigError,
            OSError,
            ValueError,
            yaml.YAMLError,
            KeyError,
            AttributeError,
            TypeError,
        ) as problem:
            why = " ".join(str(problem).split())  # one line, as lightkube's YAML errors are not
            raise KubeconfigError(
                f"no cluster to run against: {why} (give --kubeconfig or KUBECONFIG, "
                "or run karpy in a pod, where the ServiceAccount's credentials are used)"
            ) from problem
        return cls(Client(config, field_manager="karpy"), ca_bundle=_ca_bundle(config))

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = CONTENT_JSON,
        timeout: float = REQUEST_TIMEOUT,
    ) -> ApiResponse:
        """One request; an error status raises :class:`ApiStatusError`."""
        if self._fence is not None and method in WRITE_METHODS:
            self._fence()
        content = orjson.dumps(body) if body is not None else None
        headers = {"Accept": CONTENT_JSON}
        if content is not None:
            headers["Content-Type"] = content_type
        response = self._http.request(
            method,
            path,
            params=dict(params or {}),
            content=content,
            headers=headers,
            timeout=timeout,
        )
        status = int(response.status_code)
        data: bytes = response.content
        if status >= 400:
            raise status_error(status, data)
        return ApiResponse(status, decode_json(data))

    @contextlib.contextmanager
    def stream_lines(self, path: str, params: Mapping[str, str], read_timeout: float) -> Iterator[LineStream]:
        """The lines of a streaming response (a watch); an error status raises ApiStatusError."""
        request = self._http.build_request(
            "GET", path, params=dict(params), headers={"Accept": CONTENT_JSON}, timeout=read_timeout
        )
        response = self._http.send(request, stream=True)
        with self._streams_lock:
            self._open_streams.add(response)
        try:
            status = int(response.status_code)
            if status >= 400:
                raise status_error(status, response.read())
            if response.headers.get("content-encoding", "").lower() == "gzip":
                # A streaming watch of kube-apiserver 1.37 (WatchListCompression) sends each
                # flush as a gzip member of its own; httpx decodes only the first member.
                lines = _lines(_gunzip_members(response.iter_raw()))
            else:
                lines = (line.encode() if isinstance(line, str) else line for line in response.iter_lines())
            yield LineStream(lines, lambda: _shut(response))
        finally:
            with self._streams_lock:
                self._open_streams.discard(response)
            response.close()

    def interrupt_streams(self) -> None:
        """Close every open stream, so the threads reading them wake up (used to stop)."""
        with self._streams_lock:
            streams = list(self._open_streams)
        for response in streams:
            _shut(response)

    def close(self) -> None:
        self.interrupt_streams()
        self._lightkube.close()
