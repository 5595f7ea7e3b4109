"""What the host's log keeps of an exception it names elsewhere in its own words."""

import logging

from pydantic import BaseModel, ValidationError


class Token(BaseModel):
    access_token: str
    expires_in: int


def test_the_mcp_sdks_oauth_errors_are_logged_without_the_token(caplog):
    """A malformed token response: pydantic's error quotes the start of the token."""
    logger = logging.getLogger("mcp.client.auth.oauth2")  # as settings.LOGGING configured it
    with caplog.at_level(logging.ERROR, logger="mcp.client.auth.oauth2"):
        try:
            Token.model_validate_json(b'{"access_token":"LEAKME-secret-token","expires_in":"x"}')
        except ValidationError:
            logger.exception("OAuth flow error")
    (record,) = caplog.records
    assert record.getMessage() == "OAuth flow error (ValidationError)"
    assert "LEAKME" not in caplog.text and record.exc_info is None
