"""A loopback stand-in for the identity endpoints (IMDS, Entra's token endpoint) and a one-blob
container, over http and https (support.tls's throwaway CA), for the token tests. Nothing leaves
127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from support.tls import LoopbackTLS

LIST_XML = (
    b'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="ctr"><Blobs>'
    b"<Blob><Name>hello.txt</Name><Properties><Content-Length>5</Content-Length>"
    b"<Last-Modified>Tue, 14 Nov 2023 22:13:20 GMT</Last-Modified></Properties></Blob>"
    b"</Blobs><NextMarker/></EnumerationResults>"
)


class StandIn:
    """IMDS, the Entra token endpoint and a one-blob container: the same handler on an http and
    an https loopback port."""

    def __init__(self, tls: LoopbackTLS):
        self.seen: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, code, body=b"", ctype="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urlparse(self.path)
                q = parse_qs(url.query)
                owner.seen.append(
                    {
                        "method": "GET",
                        "path": url.path,
                        "query": q,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                )
                if url.path == "/metadata/identity/oauth2/token":
                    if (
                        self.headers.get("Metadata") != "true"
                        or q.get("resource", [""])[0].rstrip("/") != "https://storage.azure.com"
                    ):
                        return self._reply(400, b'{"error":"bad request"}')
                    # The fields IMDS sends, numbers as strings as it writes them.
                    answer = {
                        "access_token": "tok-imds",
                        "expires_in": "3600",
                        "expires_on": str(int(time.time()) + 3600),
                        "resource": "https://storage.azure.com",
                        "token_type": "Bearer",
                    }
                    return self._reply(200, json.dumps(answer).encode())
                if url.path == "/acct/ctr" and q.get("comp") == ["list"]:
                    return self._reply(200, LIST_XML, "application/xml")
                self._reply(404, b"")

            def do_POST(self):
                url = urlparse(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                form = parse_qs(body)
                owner.seen.append(
                    {
                        "method": "POST",
                        "path": url.path,
                        "form": form,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                )
                if url.path == "/tenant-1/oauth2/v2.0/token":
                    ok = (
                        form.get("grant_type") == ["client_credentials"]
                        and form.get("client_id") == ["client-1"]
                        and form.get("client_assertion") == ["federated-jwt"]
                        and form.get("scope") == ["https://storage.azure.com/.default"]
                    )
                    if ok:
                        return self._reply(
                            200,
                            json.dumps(
                                {"access_token": "tok-workload", "expires_in": 3600}
                            ).encode(),
                        )
                    return self._reply(401, b'{"error":"invalid_client"}')
                self._reply(404, b"")

        self.ca_file = tls.ca_file
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.tls_server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.tls_server.socket = tls.server_context().wrap_socket(
            self.tls_server.socket, server_side=True
        )
        for srv in (self.server, self.tls_server):
            threading.Thread(target=srv.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def tls_url(self) -> str:
        return f"https://127.0.0.1:{self.tls_server.server_address[1]}"

    def blob_auth(self) -> list:
        return [s["headers"].get("authorization") for s in self.seen if s["path"] == "/acct/ctr"]

    def close(self):
        for srv in (self.server, self.tls_server):
            srv.shutdown()
            srv.server_close()


def token_env(extra: dict) -> dict:
    """Overrides for run_ferry: no key and no forced source, so the chain reaches the token sources."""
    return {"AZURE_STORAGE_KEY": None, "AZURE_STORAGE_ACCOUNT": None, "FERRY_AUTH": None, **extra}
