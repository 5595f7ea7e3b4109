"""How much of an MCP server's HTTP answer the host reads: one message, at most
MCPLET_MAX_MESSAGE_BYTES. The SDK holds each SSE event to that (its own default, 1 MiB, lost
a result the host would have taken); a JSON body is held to it here as it arrives (nothing
capped one before: a server's 50 MB tools/list took 400 MB to read). The host asks for no
content coding, and refuses a JSON body coded anyway, whose decoded size no byte count of
what arrives would bound."""

import httpx2
from django.conf import settings


class Unread(httpx2.StreamError):
    """A JSON answer the host would not read. The SDK answers its request with a parse error
    that quotes this message; `said` finds it there, and returns what it says."""

    WORDS = ""

    @classmethod
    def said(cls, message):
        return message[message.index(cls.WORDS) :] if cls.WORDS in message else None


class TooLarge(Unread):
    WORDS = "its answer is over MCPLET_MAX_MESSAGE_BYTES"


class Encoded(Unread):
    WORDS = "the server coded its answer"


ACCEPT = {"Accept-Encoding": "identity"}


async def hold_to_limit(response):
    """An httpx `response` event hook: a JSON body is read through `_Held` from now on."""
    if response.headers.get("content-type", "").lower().startswith("application/json"):
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        response.stream = _Held(response.stream, settings.MCPLET_MAX_MESSAGE_BYTES, coding)


class _Held(httpx2.AsyncByteStream):
    def __init__(self, stream, limit, coding):
        self._stream, self._limit, self._coding = stream, limit, coding

    async def __aiter__(self):
        if self._coding != "identity":
            raise Encoded(
                f"{Encoded.WORDS} {self._coding!r}, which the host did not ask for "
                "(Accept-Encoding: identity)"
            )
        read = 0
        async for chunk in self._stream:
            read += len(chunk)
            if read > self._limit:
                limit = f"{self._limit:,} bytes"
                raise TooLarge(f"{TooLarge.WORDS} ({limit}): the host read no further")
            yield chunk

    async def aclose(self):
        await self._stream.aclose()
