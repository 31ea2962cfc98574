"""An OpenAI-compatible HTTP API for one model: GET /v1/models, POST /v1/completions and /v1/chat/completions, with
server-sent events when `stream` is true.

Built on the standard library's http.server: the API is a handful of JSON routes and one model that runs one
request at a time, so a web framework would add a dependency without adding anything used. Each connection gets a
thread (ThreadingHTTPServer) so waiting clients are accepted, and generation is serialized by a first-come,
first-served ticket lock: requests queue, none is dropped.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tinycore.llm.chat import Completion, ContextOverflowError, Session
from tinycore.llm.config import UnsupportedModelError

MAX_BODY = 16 << 20
"""The largest request body accepted (bytes)."""


class RequestError(Exception):
    """A request the API refuses: HTTP status, message, OpenAI error type, the parameter at fault, a code."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error object."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class TicketLock:
    """A lock granted in the order it was asked for."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.next_ticket = 0
        self.serving = 0

    def __enter__(self) -> None:
        with self.condition:
            ticket = self.next_ticket
            self.next_ticket += 1
            self.condition.wait_for(lambda: self.serving == ticket)

    def __exit__(self, *_: object) -> None:
        with self.condition:
            self.serving += 1
            self.condition.notify_all()


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float, integer: bool = False) -> Any:
    value = body.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise RequestError(400, f"'{name}' must be {'an integer' if integer else 'a number'}, got {value!r}", name)
    if not low <= value <= high:
        raise RequestError(400, f"'{name}' must lie in [{low}, {high}], got {value!r}", name)
    return value


class LLMServer:
    """The API's logic, apart from HTTP: parse a request body, run it, return a JSON body or an SSE stream."""

    def __init__(self, session: Session, model_name: str):
        self.session, self.model_name = session, model_name
        self.lock = TicketLock()
        self.created = int(time.time())

    def models(self) -> dict[str, Any]:
        """GET /v1/models."""
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created,
                                            "owned_by": "tinycore"}]}

    def prepare(self, route: str, body: Any) -> tuple[list[int], dict[str, Any]]:
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
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if isinstance(prompt, list) and prompt and all(isinstance(token, int) for token in prompt):
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
        options = {"max_tokens": max_tokens, "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
                   "top_p": _number(body, "top_p", 1.0, 1e-9, 1.0), "top_k": _number(body, "top_k", 0, 0, 1 << 30,
                                                                                      integer=True),
                   "seed": seed, "stop": stop, "stream": bool(body.get("stream", False)),
                   "include_usage": bool((body.get("stream_options") or {}).get("include_usage", False))}
        return ids, options

    def run(self, route: str, ids: list[int], options: dict[str, Any]) -> Generator[dict[str, Any], None, None]:
        """The response objects: one for a plain request; chunks (the last with the usage, if asked) when
        streaming. Holds the generation lock while it runs."""
        identifier = ("chatcmpl-" if route == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        kind = "chat.completion" if route == "chat" else "text_completion"
        completion = Completion(prompt_tokens=len(ids))
        with self.lock:
            try:
                pieces = self.session.complete(ids, completion, options["max_tokens"], options["temperature"],
                                               options["top_k"], options["top_p"], options["seed"], options["stop"])
                if options["stream"]:
                    if route == "chat":
                        yield self._chunk(identifier, created, {"role": "assistant", "content": ""}, None)
                    for piece in pieces:
                        yield self._chunk(identifier, created, {"content": piece} if route == "chat" else piece,
                                          None)
                    yield self._chunk(identifier, created, {} if route == "chat" else "", completion.finish_reason)
                    if options["include_usage"]:
                        yield {"id": identifier, "object": kind + ("" if route == "completions" else ".chunk"),
                               "created": created, "model": self.model_name, "choices": [],
                               "usage": self._usage(completion)}
                    return
                text = "".join(pieces)
            except ContextOverflowError as error:
                raise RequestError(400, str(error), None, "context_length_exceeded") from None
        choice: dict[str, Any] = {"index": 0, "finish_reason": completion.finish_reason, "logprobs": None}
        if route == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        yield {"id": identifier, "object": kind, "created": created, "model": self.model_name, "choices": [choice],
               "usage": self._usage(completion)}

    def _chunk(self, identifier: str, created: int, content: Any, finish: str | None) -> dict[str, Any]:
        if isinstance(content, dict):
            return {"id": identifier, "object": "chat.completion.chunk", "created": created, "model": self.model_name,
                    "choices": [{"index": 0, "delta": content, "finish_reason": finish, "logprobs": None}]}
        return {"id": identifier, "object": "text_completion", "created": created, "model": self.model_name,
                "choices": [{"index": 0, "text": content, "finish_reason": finish, "logprobs": None}]}

    @staticmethod
    def _usage(completion: Completion) -> dict[str, int]:
        return {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
                "total_tokens": completion.prompt_tokens + completion.completion_tokens}


def make_handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    """The request handler class serving `server`'s routes."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "tinycore-llm"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
            pass

        def _send_json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
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

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            routes = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/completions": "completions",
                      "/chat/completions": "chat"}
            route = routes.get(self.path.rstrip("/"))
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0 or length > MAX_BODY:
                self.close_connection = True
                return self._error(RequestError(413, f"the body is larger than {MAX_BODY} bytes"))
            raw = self.rfile.read(length) if length else b""
            if route is None:
                return self._error(RequestError(404, f"no route POST {self.path}; routes: {', '.join(routes)}"))
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                return self._error(RequestError(400, f"the body is not valid JSON: {error}"))
            try:
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
                responses.close()  # the client left: end the generation, release the lock
            return None

    return Handler


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest


class _QueueingServer(ThreadingHTTPServer):
    request_queue_size = 128  # connections the kernel holds while every handler thread is busy
    daemon_threads = True


def serve(session: Session, model_name: str, port: int, host: str = "127.0.0.1",
          ready: threading.Event | None = None) -> ThreadingHTTPServer:
    """Serve the API on host:port until interrupted (`ready` is set once the socket listens; port 0 picks a free
    port, printed with the address). Returns the server after it stops."""
    api = LLMServer(session, model_name)
    httpd = _QueueingServer((host, port), make_handler(api))
    print(f"serving {model_name} on http://{host}:{httpd.server_address[1]}/v1", flush=True)
    if ready is not None:
        ready.set()
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
    return httpd
