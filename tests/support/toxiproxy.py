"""Drive a real toxiproxy-server (Shopify's TCP fault proxy, built by scripts/setup.sh) on loopback.

``start_toxiproxy(repo_root)`` runs the server on a free 127.0.0.1 port; ``server.proxy(upstream_port)``
opens a TCP proxy on another free loopback port in front of ``upstream_port``, and ``toxic(...)``
adds one of toxiproxy's toxics to it through the server's HTTP API.

Toxicity is the share of *connections* a toxic acts on (toxiproxy rolls the dice per connection
and direction when the link starts), not of requests: a client that keeps connections alive sees
a toxic on every request of an unlucky connection and on none of a lucky one.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.azurite import _die_with_parent, free_port, log_tail, stop_process

TOXICS = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data")


class ToxiproxyError(RuntimeError):
    pass


@dataclass
class Toxiproxy:
    api_port: int
    process: subprocess.Popen
    log_path: Path
    _counter: int = field(default=0, repr=False)

    def api(self, method: str, path: str, body: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=10)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status >= 300:
            raise ToxiproxyError(
                f"toxiproxy {method} {path}: {resp.status} {data.decode(errors='replace')}"
            )
        return json.loads(data) if data.strip() else None

    def proxy(self, upstream_port: int, name: str | None = None) -> TcpProxy:
        self._counter += 1
        name = name or f"p{self._counter}"
        got = self.api(
            "POST",
            "/proxies",
            {
                "name": name,
                "listen": "127.0.0.1:0",
                "upstream": f"127.0.0.1:{upstream_port}",
                "enabled": True,
            },
        )
        port = int(got["listen"].rsplit(":", 1)[1])
        return TcpProxy(self, name, port)

    def stop(self) -> None:
        stop_process(self.process)


@dataclass
class TcpProxy:
    server: Toxiproxy
    name: str
    port: int
    toxics: list = field(default_factory=list)

    def toxic(
        self, kind: str, stream: str = "downstream", toxicity: float = 1.0, **attributes
    ) -> str:
        """Add a toxic. ``stream``: "downstream" acts on what the server sends back, "upstream" on
        what the client sends. Returns its name."""
        if kind not in TOXICS:
            raise ValueError(f"unknown toxic {kind!r}")
        if not 0.0 <= toxicity <= 1.0:
            raise ValueError("toxicity is a share between 0 and 1")
        name = f"{kind}_{stream}_{len(self.toxics)}"
        self.server.api(
            "POST",
            f"/proxies/{self.name}/toxics",
            {
                "name": name,
                "type": kind,
                "stream": stream,
                "toxicity": toxicity,
                "attributes": attributes,
            },
        )
        self.toxics.append(name)
        return name

    def clear(self) -> None:
        """Remove every toxic; connections already open go on without them."""
        for name in self.toxics:
            self.server.api("DELETE", f"/proxies/{self.name}/toxics/{name}")
        self.toxics.clear()

    def set_enabled(self, enabled: bool) -> None:
        """Disabling closes every connection and stops listening; enabling listens again."""
        self.server.api("POST", f"/proxies/{self.name}", {"enabled": enabled})

    def delete(self) -> None:
        self.server.api("DELETE", f"/proxies/{self.name}")


def toxiproxy_binary(repo_root: Path) -> Path:
    return repo_root / ".tools" / "bin" / "toxiproxy-server"


def start_toxiproxy(
    repo_root: Path, log_dir: Path, start_timeout: float = 15.0, attempts: int = 3
) -> Toxiproxy:
    binary = toxiproxy_binary(repo_root)
    if not binary.exists():
        raise RuntimeError(
            f"{binary} is missing: run `make setup` (scripts/setup.sh builds it with Go)"
        )
    last = ""
    for attempt in range(attempts):
        port = free_port()
        log_path = log_dir / f"toxiproxy-{attempt}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [str(binary), "-host", "127.0.0.1", "-port", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        server = Toxiproxy(port, proc, log_path)
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                server.api("GET", "/version")
                return server
            except (OSError, ToxiproxyError):
                time.sleep(0.05)
        last = log_tail(log_path, 30)
        server.stop()
    raise RuntimeError(
        f"toxiproxy-server did not start after {attempts} attempts; last log:\n{last}"
    )
