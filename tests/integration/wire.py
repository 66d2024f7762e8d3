"""A recording TLS proxy in front of the control plane's API server: what a client *sent*, and when.

The API server's audit log tells when the server *received* a request, and a
request sent while the server was stopped (SIGSTOP) is received when it
resumes, however long before that it was sent. Whether a replica wrote after
its renew deadline is a question about the sending side, so the replica under
test talks to the API server through this proxy, which notes each request's
method, path and the monotonic time its head arrived, then passes it on.

It terminates TLS with the API server's own serving certificate (its names
include the host both listen on) and opens its own TLS connection to the
server with the admin client certificate, so the server sees the same user
as the admin kubeconfig. Requests are read and recorded as they come, on the
client's side of the proxy, even while the upstream connection is still being
made or the server does not answer: the record is the client's sending time.
Responses (watch streams included) are relayed as bytes. HTTP/1.1 only (ALPN
says so; the clients here never ask for h2). One asyncio loop on a thread of
its own serves every connection, so no TLS socket is ever used by two
threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

HEAD_END = b"\r\n\r\n"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class SentRequest:
    at: float  # time.monotonic() when the request's head had arrived
    method: str
    path: str

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS


class UnreadableRequestError(Exception):
    """A request the proxy cannot frame (chunked upload, no length): the record would be incomplete."""


class RecordingProxy:
    def __init__(self, state_dir: Path, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        server = urlsplit(config["clusters"][0]["cluster"]["server"])
        assert server.hostname is not None and server.port is not None
        self.host, self.upstream_port = server.hostname, server.port
        pki = state_dir / "pki"
        self.ca = pki / "ca.crt"
        self._serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._serving.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
        self._serving.set_alpn_protocols(["http/1.1"])
        self._upstream = ssl.create_default_context(cafile=str(self.ca))
        self._upstream.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self._upstream.set_alpn_protocols(["http/1.1"])
        self._lock = threading.Lock()
        self.requests: list[SentRequest] = []
        self.problems: list[str] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()  # both sides of every open connection
        self._thread = threading.Thread(target=self._loop.run_forever, name="wire", daemon=True)

    def kubeconfig(self, path: Path) -> Path:
        """An admin kubeconfig whose server is this proxy (which authenticates upstream as the admin)."""
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "wire",
                            "cluster": {
                                "server": f"https://{self.host}:{self.port}",
                                "certificate-authority": str(self.ca),
                            },
                        }
                    ],
                    # The proxy asks for no client certificate; these make the file a usable
                    # admin kubeconfig all the same (kubectl asks for a password without them).
                    "users": [
                        {
                            "name": "wire",
                            "user": {
                                "client-certificate": str(self.ca.parent / "admin.crt"),
                                "client-key": str(self.ca.parent / "admin.key"),
                            },
                        }
                    ],
                    "contexts": [{"name": "wire", "context": {"cluster": "wire", "user": "wire"}}],
                    "current-context": "wire",
                }
            )
        )
        return path

    def start(self) -> RecordingProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def close(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()  # every connection's tasks then end on their own
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            if tasks:
                await asyncio.wait(tasks, timeout=5)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def cut(self) -> int:
        """Close every open connection (watches included), as a network blip would; the number closed.

        The proxy goes on accepting: the clients connect again at once.
        """

        async def close_all() -> int:
            writers = list(self._writers)
            for writer in writers:
                writer.close()
            return len(writers)

        return asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)

    def writes(self) -> list[SentRequest]:
        with self._lock:
            return [request for request in self.requests if request.is_write]

    # -- the connections (all on the proxy's loop) --------------------------------

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, self.host, 0, ssl=self._serving)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        outgoing: asyncio.Queue[bytes | None] = asyncio.Queue()
        forwarding = asyncio.ensure_future(self._forward(outgoing, writer))
        try:
            await self._read_requests(reader, outgoing)
        except UnreadableRequestError as problem:
            with self._lock:
                self.problems.append(str(problem))
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            outgoing.put_nowait(None)
        with contextlib.suppress(Exception):
            await forwarding
        self._writers.discard(writer)

    async def _read_requests(
        self, reader: asyncio.StreamReader, outgoing: asyncio.Queue[bytes | None]
    ) -> None:
        while True:
            try:
                head = await reader.readuntil(HEAD_END)
            except asyncio.IncompleteReadError:
                return  # the client closed the connection between two requests
            at = time.monotonic()
            lines = head[: -len(HEAD_END)].decode("latin-1").split("\r\n")
            method, path, _version = lines[0].split(" ", 2)
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:])
            }
            if "chunked" in headers.get("transfer-encoding", "").lower():
                raise UnreadableRequestError(f"{method} {path}: a chunked body")
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            with self._lock:
                self.requests.append(SentRequest(at, method, path.split("?", 1)[0]))
            outgoing.put_nowait(head + body)

    async def _forward(self, outgoing: asyncio.Queue[bytes | None], client: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream = await asyncio.open_connection(
                self.host, self.upstream_port, ssl=self._upstream, server_hostname=self.host
            )
        except (OSError, ssl.SSLError):
            client.close()
            return
        self._writers.add(upstream)
        relaying = asyncio.ensure_future(self._relay_responses(upstream_reader, client))
        try:
            while (data := await outgoing.get()) is not None:
                upstream.write(data)
                await upstream.drain()
        except (OSError, ssl.SSLError):
            pass
        finally:
            upstream.close()  # the client is gone: so is anything the server still streams to it
            with contextlib.suppress(Exception):
                await relaying
            self._writers.discard(upstream)

    @staticmethod
    async def _relay_responses(upstream: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        try:
            while chunk := await upstream.read(65536):
                client.write(chunk)
                await client.drain()
        except (OSError, ssl.SSLError):
            pass
        finally:
            client.close()
