"""An OpenAI-compatible HTTP API for one model: GET /v1/models, POST /v1/completions and /v1/chat/completions, with
server-sent events when `stream` is true.

Built on the standard library's http.server: the API is a handful of JSON routes in front of one model, so a web
framework would add a dependency without adding anything used. Each connection gets a thread (ThreadingHTTPServer)
that parses its request, hands its sequences (`n` of them) to the continuous-batching scheduler
(tinycore.llm.batching), and turns the tokens that come back into text, stop strings and JSON or server-sent events.
Beyond the scheduler's queue cap a request gets 429; malformed requests get 4xx JSON, never a bare connection drop.
"""
from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal, TypedDict, overload

from tinycore.llm.batching import (
    STEP_PREFILL,
    BatchScheduler,
    ErrorEvent,
    Event,
    FinishEvent,
    GenerationRequest,
    QueueFullError,
    TokenEvent,
)
from tinycore.llm.chat import Session, TextAssembler
from tinycore.llm.config import UnsupportedModelError

MAX_BODY = 16 << 20
"""The largest request body accepted (bytes)."""

SOCKET_TIMEOUT = 60.0
"""Seconds a connection may stall while the server reads from or writes to it (a body that stops arriving, a client
that stops reading its stream, an idle keep-alive connection) before it is closed."""

MAX_CHOICES = 16
"""The largest `n` (choices per request)."""

MAX_LOGPROBS = 20
"""The most alternatives per token that `logprobs` (completions) or `top_logprobs` (chat) may ask for."""


class RequestError(Exception):
    """A request the API refuses: HTTP status, message, OpenAI error type, the parameter at fault, a code."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, object]:
        """The OpenAI-style error object."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@overload
def _number(body: Mapping[str, object], name: str, default: float, low: float, high: float,
            integer: Literal[False] = False) -> float: ...


@overload
def _number(body: Mapping[str, object], name: str, default: float, low: float, high: float,
            integer: Literal[True]) -> int: ...


def _number(body: Mapping[str, object], name: str, default: float, low: float, high: float,
            integer: bool = False) -> int | float:
    """`body[name]` (`default` when absent or null) checked to be a number (an int when `integer`) in [low, high];
    a RequestError naming the parameter otherwise."""
    value = body.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise RequestError(400, f"'{name}' must be {'an integer' if integer else 'a number'}, got {value!r}", name)
    if not low <= value <= high:
        raise RequestError(400, f"'{name}' must lie in [{low}, {high}], got {value!r}", name)
    return value


class ModelList(TypedDict):
    """GET /v1/models's answer: the one model this server runs."""
    object: str
    data: list[dict[str, object]]


class SamplingOptions(TypedDict):
    """A completion request's options, checked: how many tokens and sequences, sampling, stops and streaming."""
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: list[str]
    stream: bool
    include_usage: bool
    n: int
    logprobs: int | None


@dataclass
class _Choice:
    """One choice's text as it is assembled, its token count, finish reason and logprob entries not yet sent."""

    assembler: TextAssembler
    text: list[str] = field(default_factory=list)
    tokens: int = 0
    finish: str | None = None
    entries: list[TokenEvent] = field(default_factory=list)
    sent_entries: list[TokenEvent] = field(default_factory=list)


class LLMServer:
    """The API's logic, apart from HTTP: parse a request body, run it, return a JSON body or an SSE stream.
    `max_queued` caps the sequences waiting for one of the model's max_batch slots; `socket_timeout` bounds a
    stalled connection."""

    def __init__(self, session: Session, model_name: str, max_queued: int = 64, step_prefill: int = STEP_PREFILL,
                 socket_timeout: float = SOCKET_TIMEOUT):
        self.session, self.model_name, self.socket_timeout = session, model_name, socket_timeout
        self.scheduler = BatchScheduler(session.model, max_queued, step_prefill)
        self.created = int(time.time())

    def models(self) -> ModelList:
        """GET /v1/models."""
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created,
                                            "owned_by": "tinycore"}]}

    def prepare(self, route: str, body: object) -> tuple[list[int], SamplingOptions]:
        """The prompt ids and the sampling options of a completion request, or a RequestError."""
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise RequestError(404, f"the model '{model}' does not exist; this server runs '{self.model_name}'",
                               "model", "model_not_found")
        tokenizer = self.session.tokenizer
        if route == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestError(400, "'messages' must be a non-empty list of {role, content} objects", "messages")
            try:
                ids = self.session.chat_ids(messages)
            except ValueError as error:
                raise RequestError(400, str(error), "messages") from None
            except UnsupportedModelError as error:
                raise RequestError(400, str(error), "messages", "chat_not_supported") from None
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
                prompt = prompt[0]  # a batch of one prompt (a single token id is a prompt of one token)
            if isinstance(prompt, list) and prompt and all(isinstance(token, int) and not isinstance(token, bool)
                                                           for token in prompt):
                if not all(0 <= token < tokenizer.vocab_size for token in prompt):
                    raise RequestError(400, f"prompt token ids must lie in [0, {tokenizer.vocab_size})", "prompt")
                ids = list(prompt)
            elif isinstance(prompt, str):
                ids = tokenizer.encode(prompt)
            else:
                raise RequestError(400, "'prompt' must be a string (or one list of token ids)", "prompt")
            if not ids:
                raise RequestError(400, "the prompt encodes to no tokens", "prompt")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(text, str) for text in stop):
            raise RequestError(400, "'stop' must be a string or a list of strings", "stop")
        context = self.session.model.max_context
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", 16 if route == "completions" else
                             max(1, context - len(ids)), 1, context, integer=True)
        if len(ids) + max_tokens > context:
            raise RequestError(400, f"this model's context holds {context} tokens; the prompt has {len(ids)} and "
                               f"{max_tokens} more were asked for: shorten the prompt or lower max_tokens",
                               "messages" if route == "chat" else "prompt", "context_length_exceeded")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise RequestError(400, f"'seed' must be an integer, got {seed!r}", "seed")
        options: SamplingOptions = {
            "max_tokens": max_tokens, "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
            "top_p": _number(body, "top_p", 1.0, 1e-9, 1.0),
            "top_k": _number(body, "top_k", 0, 0, 1 << 30, integer=True),
            "seed": seed, "stop": stop, "stream": bool(body.get("stream", False)),
            "include_usage": bool((body.get("stream_options") or {}).get("include_usage", False)),
            "n": _number(body, "n", 1, 1, MAX_CHOICES, integer=True), "logprobs": self._logprobs(route, body)}
        return ids, options

    @staticmethod
    def _logprobs(route: str, body: Mapping[str, object]) -> int | None:
        """How many alternatives each token's log-probability comes with, or None when none were asked for:
        completions take `logprobs: k`, chats `logprobs: true` with `top_logprobs: k`."""
        if route == "completions":
            if body.get("logprobs") is None:
                return None
            return int(_number(body, "logprobs", 0, 0, MAX_LOGPROBS, integer=True))
        wanted = body.get("logprobs", False)
        if wanted is not None and not isinstance(wanted, bool):
            raise RequestError(400, f"'logprobs' must be true or false, got {wanted!r}", "logprobs")
        if body.get("top_logprobs") is not None and not wanted:
            raise RequestError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs")
        return int(_number(body, "top_logprobs", 0, 0, MAX_LOGPROBS, integer=True)) if wanted else None

    def run(self, route: str, ids: list[int], options: SamplingOptions) -> Generator[dict[str, object], None, None]:
        """The response objects: one for a plain request; chunks (the last with the usage, if asked) when
        streaming. The request's `n` sequences run in the batch scheduler; closing the generator (a client that
        left) cancels them."""
        identifier = ("chatcmpl-" if route == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        kind = "chat.completion" if route == "chat" else "text_completion"
        tokenizer = self.session.tokenizer
        events: queue.Queue[Event] = queue.Queue()
        count, seed, stream = options["n"], options["seed"], options["stream"]
        requests = [GenerationRequest(list(ids), options["max_tokens"], events, options["temperature"],
                                      options["top_k"], options["top_p"], None if seed is None else seed + index,
                                      frozenset(tokenizer.stop_ids), options["logprobs"], index)
                    for index in range(count)]
        choices = [_Choice(TextAssembler(tokenizer, options["stop"])) for _ in range(count)]
        capacity = self.session.model.max_batch + self.scheduler.max_queued
        if count > capacity:
            raise RequestError(400, f"'n' is {count}, more sequences than this server runs and queues together "
                               f"({capacity}: --parallel plus --max-queue)", "n")
        try:
            self.scheduler.submit(requests)
        except QueueFullError as error:
            raise RequestError(429, f"the server is busy: {error}; retry later", None, "queue_full",
                               "rate_limit_error") from None
        try:
            if stream and route == "chat":
                for index in range(count):
                    yield self._chunk(route, identifier, created, index, {"role": "assistant", "content": ""}, None)
            unfinished = count
            while unfinished:
                event = events.get()
                choice = choices[event.index]
                if choice.finish is not None:
                    continue  # it ended at a stop string: what its sequence did before the cancel is dropped
                if isinstance(event, ErrorEvent):
                    failure = RequestError(500, f"generation failed: {event.message}", None, None, "server_error")
                    if not stream:
                        raise failure
                    yield failure.body()
                    return
                piece = ""
                if isinstance(event, TokenEvent):
                    choice.tokens += 1
                    if event.logprob is not None and event.token not in tokenizer.stop_ids:
                        choice.entries.append(event)
                    piece = choice.assembler.add(event.token)
                    if choice.assembler.stopped:
                        choice.finish = "stop"
                        requests[event.index].cancelled = True
                else:
                    assert isinstance(event, FinishEvent)
                    piece = choice.assembler.finish()
                    choice.finish = event.reason
                choice.text.append(piece)
                if stream and (piece or choice.entries):
                    delta = {"content": piece} if route == "chat" else piece
                    yield self._chunk(route, identifier, created, event.index, delta, None, self._entries(
                        route, choice))
                if choice.finish is not None:
                    unfinished -= 1
                    if stream:
                        yield self._chunk(route, identifier, created, event.index, {} if route == "chat" else "",
                                          choice.finish, self._entries(route, choice))
            usage = self._usage(len(ids), choices)
            if stream:
                if options["include_usage"]:
                    yield {"id": identifier, "object": kind + ("" if route == "completions" else ".chunk"),
                           "created": created, "model": self.model_name, "choices": [], "usage": usage}
                return
            results = []
            for index, choice in enumerate(choices):
                text = "".join(choice.text)
                result: dict[str, object] = {"index": index, "finish_reason": choice.finish,
                                          "logprobs": self._entries(route, choice)}
                if route == "chat":
                    result["message"] = {"role": "assistant", "content": text}
                else:
                    result["text"] = text
                results.append(result)
            yield {"id": identifier, "object": kind, "created": created, "model": self.model_name,
                   "choices": results, "usage": usage}
        finally:
            for request in requests:
                request.cancelled = True

    def _entries(self, route: str, choice: _Choice) -> dict[str, object] | None:
        """The OpenAI logprobs object of the choice's entries not yet sent (None without logprobs)."""
        if not choice.entries:
            return None
        tokenizer = self.session.tokenizer

        def text(token: int) -> str:
            return tokenizer.token_bytes(token).decode("utf-8", errors="replace")
        entries, offset = choice.entries, sum(len(text(entry.token)) for entry in choice.sent_entries)
        choice.sent_entries.extend(entries)
        choice.entries = []
        if route == "chat":
            return {"content": [{"token": text(entry.token), "logprob": entry.logprob,
                                 "bytes": list(tokenizer.token_bytes(entry.token)),
                                 "top_logprobs": [{"token": text(token), "logprob": logprob,
                                                   "bytes": list(tokenizer.token_bytes(token))}
                                                  for token, logprob in entry.top]} for entry in entries]}
        offsets = []
        for entry in entries:
            offsets.append(offset)
            offset += len(text(entry.token))
        return {"tokens": [text(entry.token) for entry in entries],
                "token_logprobs": [entry.logprob for entry in entries],
                "top_logprobs": [{text(token): logprob for token, logprob in entry.top} for entry in entries],
                "text_offset": offsets}

    def _chunk(self, route: str, identifier: str, created: int, index: int, content: object, finish: str | None,
               logprobs: dict[str, object] | None = None) -> dict[str, object]:
        choice: dict[str, object] = {"index": index, "finish_reason": finish, "logprobs": logprobs}
        if route == "chat":
            choice["delta"] = content
            return {"id": identifier, "object": "chat.completion.chunk", "created": created, "model": self.model_name,
                    "choices": [choice]}
        choice["text"] = content
        return {"id": identifier, "object": "text_completion", "created": created, "model": self.model_name,
                "choices": [choice]}

    @staticmethod
    def _usage(prompt_tokens: int, choices: list[_Choice]) -> dict[str, int]:
        completion_tokens = sum(choice.tokens for choice in choices)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}


def make_handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    """The request handler class serving `server`'s routes."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "tinycore-llm"
        timeout = server.socket_timeout  # applied to the connection by StreamRequestHandler.setup

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's signature
            pass

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """http.server's own errors (a malformed request line or header, an unsupported method) as OpenAI
            error JSON instead of an HTML page."""
            self.close_connection = True
            if self.request_version == "HTTP/0.9":  # a request line too broken to name a version: answer in 1.1,
                self.request_version = "HTTP/1.1"  # since an HTTP/0.9 reply has no status line for clients to read
            self._send_json(code, RequestError(code, message or explain or "malformed request").body())

        def _send_json(self, status: int, body: Mapping[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _error(self, error: RequestError) -> None:
            self._send_json(error.status, error.body())

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send_json(200, server.models())
            elif self.path.rstrip("/").startswith("/v1/models/"):
                name = self.path.rstrip("/").rsplit("/", 1)[1]
                if name != server.model_name:
                    self._error(RequestError(404, f"the model '{name}' does not exist", "model", "model_not_found"))
                else:
                    self._send_json(200, server.models()["data"][0])
            else:
                self._error(RequestError(404, f"no route GET {self.path}; try GET /v1/models"))

        def _body(self) -> bytes:
            """The request body, read by its Content-Length (a RequestError, closing the connection, when the
            header is missing with a chunked body, not a number, negative or too large)."""
            declared = self.headers.get("Content-Length")
            if declared is None:
                if self.headers.get("Transfer-Encoding"):
                    self.close_connection = True
                    raise RequestError(411, "send the body with a Content-Length header (chunked bodies are not "
                                            "read)")
                return b""
            text = declared.strip()
            if not text.isdigit():
                self.close_connection = True
                raise RequestError(400, f"the Content-Length header must be a number of bytes, got {declared!r}")
            if int(text) > MAX_BODY:
                self.close_connection = True
                raise RequestError(413, f"the body is larger than {MAX_BODY} bytes")
            data = bytearray()
            try:
                while len(data) < int(text):
                    piece = self.rfile.read1(int(text) - len(data))
                    if not piece:
                        break
                    data += piece
            except TimeoutError:
                pass
            if len(data) < int(text):
                self.close_connection = True
                raise RequestError(408, f"the body stopped after {len(data)} of the {text} bytes its Content-Length "
                                        f"declares (waited {server.socket_timeout:g} s)")
            return bytes(data)

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            routes = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/completions": "completions",
                      "/chat/completions": "chat"}
            route = routes.get(self.path.rstrip("/"))
            try:
                raw = self._body()
                if route is None:
                    raise RequestError(404, f"no route POST {self.path}; routes: {', '.join(routes)}")
                try:
                    body = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as error:
                    raise RequestError(400, f"the body is not valid JSON: {error}") from None
                ids, options = server.prepare(route, body)
                responses = server.run(route, ids, options)
                if not options["stream"]:
                    return self._send_json(200, next(responses))
                first = next(responses)  # errors before the first chunk still get a JSON status
            except RequestError as error:
                return self._error(error)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for chunk in _chain(first, responses):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                responses.close()  # a client that left cancels its sequences
            return None

    return Handler


def _chain(first: dict[str, object], rest: Iterator[dict[str, object]]) -> Iterator[dict[str, object]]:
    yield first
    yield from rest


class _QueueingServer(ThreadingHTTPServer):
    request_queue_size = 128  # connections the kernel holds while every handler thread is busy
    daemon_threads = True


def bind(host: str, port: int) -> ThreadingHTTPServer:
    """A listening HTTP server on host:port (port 0 picks a free one) that `serve` will run; raises OSError when the
    address cannot be bound (a port in use), so a caller can learn that before it loads a model."""
    return _QueueingServer((host, port), BaseHTTPRequestHandler)


def serve(session: Session, model_name: str, port: int, host: str = "127.0.0.1",
          ready: threading.Event | None = None, max_queued: int = 64,
          httpd: ThreadingHTTPServer | None = None, socket_timeout: float = SOCKET_TIMEOUT) -> ThreadingHTTPServer:
    """Serve the API on host:port (or on `httpd`, from `bind`) until interrupted (`ready` is set once the socket
    listens; port 0 picks a free port, printed with the address). The model's max_batch slots run at once and
    `max_queued` more sequences wait; beyond that a request gets 429; a connection stalled for `socket_timeout`
    seconds is closed. Raises OSError when the address cannot be bound (a port in use). Returns the server after it
    stops."""
    httpd = httpd if httpd is not None else bind(host, port)
    api = LLMServer(session, model_name, max_queued, socket_timeout=socket_timeout)
    httpd.RequestHandlerClass = make_handler(api)
    print(f"serving {model_name} ({session.model.max_batch} sequences at once, up to {max_queued} waiting) "
          f"on http://{host}:{httpd.server_address[1]}/v1", flush=True)
    if ready is not None:
        ready.set()
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
        api.scheduler.close()
    return httpd
