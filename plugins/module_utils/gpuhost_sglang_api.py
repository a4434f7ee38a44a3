# Copyright: gpuhost contributors
# Apache-2.0
"""The one client of SGLang's HTTP API, and the one answer check.

Everything in the collection that talks to an SGLang server (the start gate's probe
`gpuhost.gpu.sglang_probe`, `gpuhost verify`'s checks) goes through `Client`, which sits on
Ansible's own `open_url`, so proxies, TLS and timeouts behave as in every other Ansible
module. The contract it speaks is SGLang 0.5.x's OpenAI-compatible server: `/health` (200
when serving, 503 while warming up), `/v1/models`, `/v1/chat/completions` (plain and SSE
streamed) and `/server_info` (docs/reference.md §3).

`contains_expected` is the one answer check: a reply passes when it holds the expected value
as a whole value ("42" is in "The answer is 42." but not in "420"). The start gate and
`gpuhost verify` both judge answers with it.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse
from urllib.error import HTTPError, URLError  # what open_url raises

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url

# A listen address that means "every address": the server is asked on loopback then.
WILDCARDS = ("0.0.0.0", "::", "")
# A thousands separator between digits ("1,234") must not hide the expected "1234".
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")


class ApiError(Exception):
    """The server could not be asked (refused, timed out, not HTTP, not JSON)."""


def base_url(host, port, scheme="http"):
    """URL of a server listening on `host`:`port`; a wildcard listener is asked on loopback,
    an IPv6 literal gets its brackets."""
    host = "127.0.0.1" if str(host or "") in WILDCARDS else str(host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{scheme}://{host}:{int(port)}"


class Client:
    """One server: base URL, optional bearer key, a per-request timeout (seconds)."""

    def __init__(self, base_url, api_key="", timeout=60.0):
        parsed = urllib.parse.urlsplit(str(base_url))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"base_url must be http(s)://host:port, got {base_url!r}")
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.base_url = str(base_url).rstrip("/")
        self.api_key = api_key or ""
        self.timeout = float(timeout)

    def _headers(self, body):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, method, path, body, timeout):
        """The response of a 2xx answer; an HTTPError (it has .code and a body) otherwise."""
        data = None if body is None else json.dumps(body).encode()
        # No proxy: the server is the host's own (loopback) or on the cluster network, never
        # behind the site's outbound proxy; the key must not travel through one either.
        return open_url(
            self.base_url + path,
            data=data,
            headers=self._headers(body),
            method=method,
            timeout=self.timeout if timeout is None else float(timeout),
            use_proxy=False,
            use_netrc=False,
            http_agent="gpuhost",
        )

    def request(self, method, path, body=None, timeout=None):
        """(status, text) of any HTTP answer. No answer at all raises ApiError with why."""
        try:
            response = self._open(method, path, body, timeout)
            try:
                return response.status, response.read().decode("utf-8", "replace")
            finally:
                response.close()
        except HTTPError as exc:
            try:
                text = exc.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException, AttributeError):
                text = ""
            return exc.code, text
        except (URLError, OSError, http.client.HTTPException, UrlsConnectionError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ApiError(f"{method} {path}: {type(exc).__name__}: {reason}") from None

    def json(self, method, path, body=None, timeout=None):
        """The parsed JSON of a 200 answer; anything else raises ApiError."""
        status, text = self.request(method, path, body, timeout)
        if status != 200:
            raise ApiError(f"{method} {path} answered HTTP {status}: {text[:200]}")
        try:
            return json.loads(text)
        except ValueError:
            raise ApiError(f"{method} {path} answered non-JSON: {text[:200]!r}") from None

    def stream(self, path, body):
        """Yield (seconds since the request was sent, parsed SSE data) for each event."""
        start = time.monotonic()
        try:
            response = self._open("POST", path, body, None)
        except HTTPError as exc:
            try:
                text = exc.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException, AttributeError):
                text = ""
            raise ApiError(f"POST {path} (stream) answered HTTP {exc.code}: {text[:200]}") from None
        except (URLError, OSError, http.client.HTTPException, UrlsConnectionError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ApiError(f"POST {path} (stream): {type(exc).__name__}: {reason}") from None
        try:
            for raw in response:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    return
                try:
                    yield time.monotonic() - start, json.loads(payload)
                except ValueError:
                    continue
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(f"POST {path} (stream): {type(exc).__name__}: {exc}") from None
        finally:
            response.close()

    # --- the endpoints -------------------------------------------------------------------

    def health(self, timeout=None):
        """/health's status code (200 serving, 503 warming up or draining)."""
        status, _ = self.request("GET", "/health", timeout=timeout)
        return status

    def models(self, timeout=None):
        """(status, ids /v1/models lists); ids are [] for any answer but a JSON 200."""
        status, text = self.request("GET", "/v1/models", timeout=timeout)
        if status != 200:
            return status, []
        try:
            data = json.loads(text).get("data") or []
        except (ValueError, AttributeError):
            return status, []
        return status, [str(m.get("id")) for m in data if isinstance(m, dict)]

    def chat(self, model, prompt, max_tokens, template_kwargs=None, timeout=None, **extra):
        """One chat completion at temperature 0 (a 200 answer's JSON, else ApiError)."""
        body = chat_body(model, prompt, max_tokens, template_kwargs, **extra)
        return self.json("POST", "/v1/chat/completions", body, timeout)


def chat_body(model, prompt, max_tokens, template_kwargs=None, **extra):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": int(max_tokens),
    }
    if template_kwargs:
        body["chat_template_kwargs"] = dict(template_kwargs)
    body.update(extra)
    return body


def first_message(response):
    """(message, finish_reason) of the first choice of a chat completion."""
    choices = (response.get("choices") if isinstance(response, dict) else None) or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = first.get("message") or {}
    return (message if isinstance(message, dict) else {}), first.get("finish_reason")


def reply_text(message):
    """The whole reply of a message: its content and, for a reasoning model, its thinking."""
    return " ".join(str(message.get(k) or "") for k in ("content", "reasoning_content")).strip()


def contains_expected(text, expected):
    """True when `expected` appears in `text` as a whole value: "42" in "is 42." but not in
    "420" or "4.2"; case-insensitive for words; thousands separators ignored."""
    text = _DIGIT_COMMA.sub("", str(text or ""))
    expected = str(expected).strip()
    if not expected:
        return False
    pattern = re.escape(expected)
    if expected[0].isalnum():
        pattern = r"(?<![\w.])" + pattern if expected[0].isdigit() else r"\b" + pattern
    if expected[-1].isalnum():
        pattern += r"(?![\w]|\.\d)"
    return re.search(pattern, text, re.IGNORECASE) is not None
