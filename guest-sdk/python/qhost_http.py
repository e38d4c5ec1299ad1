"""A small blocking HTTP client on wasi:http, for qhost handlers built against the
`handler-http` world.

The host allows only the origins the plugin's manifest grants (`[capabilities] http`) and puts
`Idempotency-Key: PLUGIN:KEY/http/N` and `Qhost-Fencing-Token` on every request, so a handler
that runs again for the same message (a retry, a crash) repeats the same keys. A refusal by the
host, or a failure on the way, raises `HttpError` with the wasi:http error code's name
(`HttpRequestDenied`, `DestinationIpProhibited`, `ConnectionRefused`, ...).

    status, headers, body = qhost_http.request("POST", url, {"content-type": "application/json"}, data)
"""

from typing import Dict, List, Optional, Tuple

from componentize_py_types import Err
from wit_world.imports import outgoing_handler, streams
from wit_world.imports import wasi_http_types as http

# The host refuses these before anything leaves: sending again will not help.
REFUSED = {"HttpRequestDenied", "DestinationIpProhibited", "ConnectionLimitReached"}


class HttpError(Exception):
    """Why a request got no response; `code` is the wasi:http error code's name."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail

    @property
    def refused(self) -> bool:
        return self.code in REFUSED


def _code(error) -> HttpError:
    name = type(error).__name__.removeprefix("ErrorCode_")
    return HttpError(name, repr(getattr(error, "value", "")))


def _stream_error(e: Err, doing: str) -> HttpError:
    if isinstance(e.value, streams.StreamError_LastOperationFailed):
        code = http.http_error_code(e.value.value)
        if code is not None:
            return _code(code)
        text = e.value.value.to_debug_string()
        # The host's own two failures of a body (see qhost_guest::http in Rust).
        if "body size exceeds limit" in text:
            return HttpError("HttpResponseBodySize", text)
        if "read timeout" in text:
            return HttpError("ConnectionReadTimeout", text)
        return HttpError("InternalError", f"{doing}: {text}")
    return HttpError("ConnectionTerminated", doing)


_METHODS = {
    "GET": http.Method_Get(),
    "HEAD": http.Method_Head(),
    "POST": http.Method_Post(),
    "PUT": http.Method_Put(),
    "DELETE": http.Method_Delete(),
    "PATCH": http.Method_Patch(),
    "OPTIONS": http.Method_Options(),
}


def request(
    method: str,
    url: str,
    headers: Optional[Dict[str, str]] = None,
    body: bytes = b"",
) -> Tuple[int, List[Tuple[str, bytes]], bytes]:
    """Sends a request and reads the whole response: (status, headers, body)."""
    scheme_text, sep, rest = url.partition("://")
    scheme = {"http": http.Scheme_Http(), "https": http.Scheme_Https()}.get(scheme_text.lower())
    if not sep or scheme is None:
        raise HttpError("InvalidUrl", f"{url!r} is not http(s)://HOST[:PORT][/PATH]")
    cut = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=len(rest))
    authority, path = rest[:cut], rest[cut:] or "/"
    entries = [(k.lower(), v.encode()) for k, v in (headers or {}).items()]
    # A known length, so the body goes with Content-Length rather than chunked.
    if body and not any(k == "content-length" for k, _ in entries):
        entries.append(("content-length", str(len(body)).encode()))
    fields = http.Fields.from_list(entries)
    req = http.OutgoingRequest(fields)
    req.set_method(_METHODS.get(method.upper()) or http.Method_Other(method))
    req.set_scheme(scheme)
    req.set_authority(authority)
    req.set_path_with_query(path)
    outgoing = req.body()
    try:
        future = outgoing_handler.handle(req, None)
    except Err as e:
        raise _code(e.value)
    written = None
    try:
        with outgoing.write() as stream:
            for i in range(0, len(body), 4096):
                stream.blocking_write_and_flush(body[i : i + 4096])
        http.OutgoingBody.finish(outgoing, None)
    except Err as e:
        written = e
    response = _wait(future)
    if written is not None:
        raise _stream_error(written, "writing the request body")
    return _read(response)


def _wait(future) -> "http.IncomingResponse":
    # option<result<result<incoming-response, error-code>>>: none while pending.
    while (result := future.get()) is None:
        future.subscribe().block()
    if isinstance(result, Err):
        raise HttpError("InternalError", "the response was taken twice")
    if isinstance(result.value, Err):
        raise _code(result.value.value)
    return result.value.value


def _read(response) -> Tuple[int, List[Tuple[str, bytes]], bytes]:
    status = response.status()
    headers = response.headers().entries()
    incoming = response.consume()
    chunks = []
    with incoming.stream() as stream:
        while True:
            try:
                chunks.append(stream.blocking_read(65536))
            except Err as e:
                if isinstance(e.value, streams.StreamError_Closed):
                    break
                raise _stream_error(e, "reading the response body")
    return status, headers, b"".join(chunks)
