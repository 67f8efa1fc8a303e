"""What went wrong reaching the API server, in one line a person can act on.

The command line may not import the client libraries (only ``kube`` does), yet it must turn a missing
kubeconfig, a refused connection, a TLS failure or a 401/403 into one line instead of a traceback.
:func:`describe` recognises exactly those failures and names the server; anything else is None, so a
programming error still surfaces as one.
"""

from __future__ import annotations

import ssl

import httpx
import httpx2
from lightkube import ApiError, ConfigError

from gpu_operator.kube.restclient import ApiError as RestApiError

_HTTP_ERRORS = (httpx.HTTPError, httpx2.HTTPError)
_TIMEOUTS = (httpx.TimeoutException, httpx2.TimeoutException)
_WHY = {401: "refused the credentials (401 Unauthorized)", 403: "forbids this (403 Forbidden)"}


def _server(error: httpx.HTTPError | httpx2.HTTPError) -> str:
    try:
        url = error.request.url  # httpx raises RuntimeError when the error carries no request
    except RuntimeError:
        return "the API server"
    return f"the API server {url.scheme}://{url.netloc.decode('ascii', 'replace')}"


def _tls(error: BaseException) -> ssl.SSLError | None:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def describe(error: BaseException) -> str | None:
    """One line for a failure to reach, or be served by, the API server; None for any other error."""
    if isinstance(error, ConfigError):
        return f"kubeconfig: {error}"
    if isinstance(error, ApiError):
        why = _WHY.get(error.status.code or 0, f"answered {error.status.code}")
        return f"{_server(error)} {why}: {error.status.message or error.status.reason or ''}".rstrip(": ")
    if isinstance(error, RestApiError):  # the simulator's own client
        return f"the API server {_WHY.get(error.code, f'answered {error.code}')}: {error.message}".rstrip(": ")
    if isinstance(error, _HTTP_ERRORS):
        tls = _tls(error)
        if tls is not None:
            return f"{_server(error)}: TLS error: {getattr(tls, 'verify_message', None) or tls}"
        what = "did not answer in time" if isinstance(error, _TIMEOUTS) else "cannot be reached"
        return f"{_server(error)} {what}: {error}"
    if isinstance(error, ssl.SSLError):
        return f"kubeconfig: TLS settings: {error}"
    return None
