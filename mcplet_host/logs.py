"""Logging filters (settings.LOGGING)."""

import logging


class ExceptionNamed(logging.Filter):
    """A record's exception named by its type, without its text or traceback: the MCP SDK's
    OAuth client logs a malformed token response with pydantic's error, whose `input_value`
    holds the start of the token, and its HTTP transport a server's unparsable answer (or one
    the host would not read, pools/bounded.py) with a traceback each. The host says what
    failed in its own words elsewhere."""

    def filter(self, record):
        if record.exc_info and record.exc_info[0] is not None:
            record.msg = f"{record.getMessage()} ({record.exc_info[0].__name__})"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True
