"""A request body as the official SDK sends it: read within the size cap, decoded, unpacked.

The SDK compresses a body of 1 KiB or more with zstd (``Content-Encoding: zstd``) when its zstd
support is installed, and sends images as ``multipart/form-data``: a ``request`` part holding the JSON
and one part per asset. The cap holds at every step: on the bytes received and on the bytes decoded
(a small zstd frame can decode to gigabytes), so no body costs more memory than the cap.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.message import Message
from typing import Any

from jevper.serve.errors import Refusal
from jevper.serve.validation import Invalid, Problem

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

ENCODINGS = ("zstd", "gzip", "deflate", "identity")


@dataclass(frozen=True)
class Body:
    json: bytes  # the request's JSON text
    assets: int  # parts of a multipart body besides the request: images, which the upstream reads none of


async def receive(
    stream: AsyncIterator[bytes], declared: str | None, encoding: str, kind: str, cap: int
) -> Body:
    """The body of a System One request, or a Refusal (413, 415) or an Invalid (422)."""
    raw = await _capped(stream, declared, cap)
    decoded = decode(raw, encoding, cap)
    return unpack(decoded, kind)


async def _capped(stream: AsyncIterator[bytes], declared: str | None, cap: int) -> bytes:
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise too_large(cap, f"{int(declared)} bytes")
    body = bytearray()
    async for chunk in stream:
        body += chunk
        if len(body) > cap:
            raise too_large(cap, "more")
    return bytes(body)


def too_large(cap: int, got: str, *, decoded: bool = False) -> Refusal:
    what = "a decoded request body" if decoded else "a request body"
    return Refusal(
        413,
        "request_too_large",
        f"expected {what} of at most {cap} bytes, got {got}; send fewer or shorter questions, or start "
        "the gateway with a larger --max-body-bytes",
    )


def decode(raw: bytes, header: str, cap: int) -> bytes:
    """The body with its Content-Encoding undone (several, as listed, undone last first)."""
    codings = [c.strip().lower() for c in header.split(",") if c.strip()]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding == "zstd":
            raw = _unzstd(raw, cap)
        elif coding in ("gzip", "x-gzip", "deflate"):
            raw = _inflate(raw, coding, cap)
        else:
            raise Refusal(
                415,
                "unsupported_media_type",
                f"expected a Content-Encoding of {', '.join(ENCODINGS)}, got {coding!r}; send the body "
                "uncompressed or with zstd",
            )
    return raw


def _unzstd(raw: bytes, cap: int) -> bytes:
    out = bytearray()
    rest = raw
    try:
        while rest:  # a body may be several frames, one after another
            frame = zstd.ZstdDecompressor()
            out += frame.decompress(rest, max_length=cap + 1 - len(out))
            if len(out) > cap:
                raise too_large(cap, "more", decoded=True)
            if not frame.eof:
                if frame.needs_input:
                    raise _undecodable("zstd", "the frame ends early")
                raise too_large(cap, "more", decoded=True)
            rest = frame.unused_data
    except zstd.ZstdError as exc:
        raise _undecodable("zstd", str(exc)) from None
    return bytes(out)


def _inflate(raw: bytes, coding: str, cap: int) -> bytes:
    out = bytearray()
    rest = raw
    while True:
        inflater = zlib.decompressobj(wbits=31 if coding != "deflate" else 15)
        try:
            out += inflater.decompress(rest, cap + 1 - len(out))
        except zlib.error as exc:
            raise _undecodable(coding, str(exc)) from None
        if len(out) > cap or inflater.unconsumed_tail:
            raise too_large(cap, "more", decoded=True)
        if not inflater.eof:
            raise _undecodable(coding, "the stream ends early")
        rest = inflater.unused_data
        # A gzip body may be several members, one after another (RFC 1952), as `gzip -c a b` writes it.
        if not rest or coding == "deflate":
            return bytes(out)


def _undecodable(coding: str, why: str) -> Invalid:
    return Invalid(
        [
            Problem(
                (),
                f"expected a body compressed with {coding} as Content-Encoding says, got one "
                f"that does not decode ({why}); send it uncompressed, or compressed whole",
            )
        ]
    )


def unpack(body: bytes, content_type: str) -> Body:
    """The JSON of the request, from a JSON body or from the ``request`` part of a multipart one."""
    header = Message()
    header["content-type"] = content_type or "application/json"
    if header.get_content_type() != "multipart/form-data":
        return Body(body, 0)
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise Invalid(
            [Problem((), "expected a multipart body with a boundary, got a Content-Type without one")]
        )
    parts = _parts(body, boundary.encode("latin-1"))
    request = parts.pop("request", None)
    if request is None:
        named = ", ".join(sorted(parts)) or "none"
        raise Invalid(
            [Problem((), f"expected a multipart part named 'request' holding the JSON, got parts {named}")]
        )
    return Body(request, len(parts))


def _parts(body: bytes, boundary: bytes) -> dict[str, bytes]:
    delimiter = b"--" + boundary
    chunks = body.split(delimiter)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        raise Invalid([Problem((), "expected a multipart body closed by its boundary, got one cut short")])
    parts: dict[str, bytes] = {}
    for index, chunk in enumerate(chunks[1:-1]):
        head, separator, content = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not separator:
            raise Invalid(
                [Problem((), f"expected headers and a blank line in multipart part {index}, got none")]
            )
        parts[_part_name(head) or f"part-{index}"] = content.removesuffix(b"\r\n")
    return parts


def _part_name(head: bytes) -> str | None:
    message = Message()
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip():
            message[name.strip()] = value.strip()
    if message.get("content-disposition") is None:
        return None
    found: Any = message.get_param("name", header="content-disposition")
    return found if isinstance(found, str) else None
