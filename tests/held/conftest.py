"""The approvers' fixtures, for the held calls' tests."""

from tests.passkey.conftest import (  # noqa: F401
    approver,
    approver_client,
    passkey_settings,
)
