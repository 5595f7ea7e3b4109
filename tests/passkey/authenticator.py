"""A software WebAuthn authenticator for server-side tests: ES256 keys, "none" attestation,
user presence and verification flags, and a counter that advances with every use.

(soft-webauthn 0.1.4 needs fido2 1.x, which caps cryptography below 45, while py_webauthn 3.0.1
needs cryptography >= 49; this stand-in is built on the libraries py_webauthn already uses.)
"""

import hashlib
import json
import os
import struct

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from webauthn.helpers import bytes_to_base64url

UP, UV, AT = 0x01, 0x04, 0x40


class SoftAuthenticator:
    def __init__(self, user_verified=True):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(32)
        self.sign_count = 0
        self.user_verified = user_verified
        self.user_handle = None
        self.rp_id = None

    @property
    def id(self):
        return bytes_to_base64url(self.credential_id)

    def create(self, options, origin):
        """What `credential.toJSON()` gives for navigator.credentials.create(options)."""
        options = options.get("publicKey", options)
        self.rp_id, self.user_handle = options["rp"]["id"], options["user"]["id"]
        client_data = _client_data("webauthn.create", options["challenge"], origin)
        point = self.key.public_key().public_numbers()
        cose = cbor2.dumps(
            {1: 2, 3: -7, -1: 1, -2: point.x.to_bytes(32, "big"), -3: point.y.to_bytes(32, "big")}
        )
        credential = struct.pack(">H", len(self.credential_id)) + self.credential_id + cose
        auth_data = self._auth_data(self.rp_id, AT) + bytes(16) + credential
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return self._json(
            {
                "clientDataJSON": bytes_to_base64url(client_data),
                "attestationObject": bytes_to_base64url(attestation),
                "transports": ["internal"],
            }
        )

    def get(self, options, origin, rp_id=None):
        """What `credential.toJSON()` gives for navigator.credentials.get(options)."""
        options = options.get("publicKey", options)
        client_data = _client_data("webauthn.get", options["challenge"], origin)
        auth_data = self._auth_data(rp_id or options.get("rpId") or self.rp_id)
        signed = auth_data + hashlib.sha256(client_data).digest()
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return self._json(
            {
                "clientDataJSON": bytes_to_base64url(client_data),
                "authenticatorData": bytes_to_base64url(auth_data),
                "signature": bytes_to_base64url(signature),
                "userHandle": self.user_handle,
            }
        )

    def _auth_data(self, rp_id, extra=0):
        self.sign_count += 1
        flags = UP | (UV if self.user_verified else 0) | extra
        rp_hash = hashlib.sha256(rp_id.encode()).digest()
        return rp_hash + bytes([flags]) + struct.pack(">I", self.sign_count)

    def _json(self, response):
        return {
            "id": self.id,
            "rawId": self.id,
            "type": "public-key",
            "response": response,
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }


def _client_data(kind, challenge, origin):
    data = {"type": kind, "challenge": challenge, "origin": origin, "crossOrigin": False}
    return json.dumps(data).encode()
