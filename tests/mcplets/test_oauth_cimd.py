"""The OAuth-protected test server with `--cimd`: a client whose id is the https URL of its
metadata document, fetched by the server from a real HTTPS server of the test (with a
certificate of its own, which the server is told to trust), used by the SDK client in place of
dynamic registration; a document that does not describe that client is refused."""

import contextlib
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mcplets.examples.oauth_protected import serve
from tests.conftest import Calls
from tests.mcplets.test_oauth_options import authorize
from tests.mcplets.test_oauth_protected import REDIRECT_URI, Browser, MemoryStorage, connect

pytestmark = pytest.mark.anyio


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )  # fmt: skip
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert, key_file = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert, key_file


class Documents:
    """An HTTPS server of JSON documents by path, which counts what it was asked for."""

    def __init__(self, folder: Path) -> None:
        self.cert, key = self_signed(folder)
        self.documents: dict[str, dict] = {}
        self.fetched: list[str] = []
        documents = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                documents.fetched.append(self.path)
                document = documents.documents.get(self.path)
                body = json.dumps(document).encode()
                self.send_response(200 if document is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.base = f"https://127.0.0.1:{self.server.server_address[1]}"

    def put(self, path: str, **document: object) -> str:
        """Serve a client's document at `path` (naming itself, unless told otherwise); its URL."""
        url = f"{self.base}{path}"
        self.documents[path] = {"client_id": url, "redirect_uris": [REDIRECT_URI], **document}
        return url

    @contextlib.contextmanager
    def serving(self) -> Iterator["Documents"]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def documents(tmp_path):
    with Documents(tmp_path).serving() as served:
        yield served


async def test_the_sdk_client_is_known_by_its_metadata_document(documents, tmp_path):
    calls = Calls(tmp_path / "calls.jsonl")
    url = documents.put("/clients/agent.json", client_name="cimd agent")
    with serve(calls_log=calls.path, cimd=True, cimd_ca=documents.cert) as base:
        async with httpx.AsyncClient() as http:
            asm = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
        storage, browser = MemoryStorage(), Browser()
        async with connect(base, storage, browser, client_metadata_url=url) as client:
            result = await client.call_tool("whoami", {"echo": "by document"})
    assert asm["client_id_metadata_document_supported"] is True
    assert "none" in asm["token_endpoint_auth_methods_supported"]
    # No registration: the URL is the client id, and the server read the document for it.
    assert storage.client_info.client_id == url
    assert storage.client_info.client_secret is None
    assert "/clients/agent.json" in documents.fetched
    assert result.structured_content["result"]["subject"] == url
    assert calls() == [{"name": "whoami", "arguments": {"echo": "by document"}, "subject": url}]


async def test_a_document_that_does_not_describe_the_client_is_refused(documents):
    other = documents.put("/clients/other.json")
    impostor = documents.put("/clients/impostor.json", client_id=other)
    elsewhere = documents.put("/clients/elsewhere.json", redirect_uris=["http://127.0.0.1:2/cb"])
    confidential = documents.put(
        "/clients/confidential.json", token_endpoint_auth_method="client_secret_basic"
    )
    missing = f"{documents.base}/clients/missing.json"
    with serve(cimd=True, cimd_ca=documents.cert) as base:
        assert "code" in await authorize(base, other)  # the well-formed one, for contrast
        for client_id in (impostor, elsewhere, confidential, missing):
            response = await authorize_directly(base, client_id)
            assert response.status_code == 400, client_id
            assert response.json()["error"] == "invalid_request"
    with serve() as base:  # without --cimd, a URL is no client
        response = await authorize_directly(base, other)
        assert response.status_code == 400
        assert "not found" in response.json()["error_description"]


async def authorize_directly(base: str, client_id: str) -> httpx.Response:
    """/authorize refusing outright (no redirect to a client it cannot trust)."""
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": "x" * 43,
        "state": "s",
    }
    async with httpx.AsyncClient() as http:
        return await http.get(f"{base}/authorize", params=query)
