"""MCP server credentials at rest: `env` and `headers` hold API keys and bearer tokens, so the
database, its dumps and its backups keep them sealed (Fernet: AES-128-CBC + HMAC-SHA256) under
a key derived from SECRET_KEY. Rotating SECRET_KEY keeps them readable while the old key is in
SECRET_KEY_FALLBACKS; the next save seals them under the new one."""

import base64
import functools
import json
import re

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

PURPOSE = b"mcplet-host: MCP server credentials"
SEALED = re.compile(r"gAAAAA[A-Za-z0-9_-]{80,}={0,2}")  # a Fernet token (version 0x80)


@functools.lru_cache(maxsize=4)
def _sealer(keys):
    def fernet(secret):
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE)
        return Fernet(base64.urlsafe_b64encode(derived.derive(secret.encode())))

    return MultiFernet([fernet(secret) for secret in keys])


def sealer():
    return _sealer((settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS))


def seal(value):
    return sealer().encrypt(json.dumps(value, sort_keys=True).encode()).decode()


def unseal(token):
    try:
        return json.loads(sealer().decrypt(token.encode()))
    except InvalidToken:
        raise ImproperlyConfigured(
            "The MCP servers' credentials were sealed under another SECRET_KEY: put the old "
            "key in SECRET_KEY_FALLBACKS to read them (saving a server re-seals it)."
        ) from None


class SealedJSONField(models.TextField):
    """A JSON value (a name → secret mapping, a client secret) stored sealed; Python code sees
    the value."""

    def from_db_value(self, value, expression, connection):
        return None if value is None else unseal(value)

    def to_python(self, value):
        # A string is sealed (from a dump), or a plain string value (a client secret a form
        # gave): only the former has a token's shape.
        return unseal(value) if isinstance(value, str) and SEALED.fullmatch(value) else value

    def get_prep_value(self, value):
        return None if value is None else seal(value)

    def value_to_string(self, obj):
        return self.get_prep_value(self.value_from_object(obj))  # dumpdata stays sealed
