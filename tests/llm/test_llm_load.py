"""A load test of `tiny llm --serve` on 127.0.0.1, bounded in count and time: 200 requests, 16 at a time, one in
five malformed. Every good request completes with the numpy reference's greedy text (completions and chats, plain
and streamed, n=2) or, when sampled, with a well-formed answer of at most max_tokens tokens; every bad one gets its
4xx status and an OpenAI error object; the server still answers afterwards."""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from llm_fixtures import byte_text, greedy_reference, raw_request, served, write_model

IM_START, IM_END = 256, 257
REQUESTS, CONCURRENCY, DEADLINE = 200, 16, 240.0
PROMPTS = ["a", "hi", "xyz", "tiny", "ok!?"]
CHATS = ["hi", "yes"]

BAD: list[tuple[str, bytes, int]] = [
    ("bad JSON", b"{not json", 400),
    ("unknown role", json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400),
    ("unknown model", json.dumps({"model": "gpt-9", "prompt": "a"}).encode(), 404),
    ("context overflow", json.dumps({"prompt": "a" * 40, "max_tokens": 20}).encode(), 400),
    ("n = 0", json.dumps({"prompt": "a", "n": 0}).encode(), 400),
    ("image part", json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(), 400),
    ("no prompt", b"{}", 400),
    ("negative max_tokens", json.dumps({"prompt": "a", "max_tokens": -1}).encode(), 400),
]
"""(what, body, status): bodies posted with a correct Content-Length."""

RAW_BAD: list[tuple[str, bytes, int]] = [
    ("Content-Length abc", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", 400),
    ("chunked body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
    ("not HTTP", b"GARBAGE\r\n\r\n", 400),
    ("unknown route", b"POST /v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 404),
]
"""(what, bytes, status): sent on a socket as they are."""


def _post(base: str, path: str, body: bytes, stream: bool = False) -> tuple[int, object]:
    request = urllib.request.Request(base + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            data = response.read()
            if not stream:
                return response.status, json.loads(data)
            lines = [line.removeprefix(b"data: ") for line in data.split(b"\n\n") if line]
            assert lines[-1] == b"[DONE]"
            return response.status, [json.loads(line) for line in lines[:-1]]
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = os.fspath(tmp_path_factory.mktemp("load") / "load.gguf")
    write_model(path, architecture="llama", byte_vocabulary=True, dim=32, hidden=64, layers=1, heads=2, kv_heads=1,
                seed=9)
    return path


def test_load(model_path: str) -> None:
    """200 requests, 16 at a time: the good ones' texts equal the reference's, the bad ones are 4xx JSON."""
    greedy = {prompt: greedy_reference(model_path, list(prompt.encode()), 5, stop=(IM_END,)) for prompt in PROMPTS}
    chat_ids = {text: [IM_START, *b"user\n", *text.encode(), IM_END, *b"\n", IM_START, *b"assistant\n"]
                for text in CHATS}
    chat_greedy = {text: greedy_reference(model_path, ids, 3, stop=(IM_END,)) for text, ids in chat_ids.items()}

    def expected_text(tokens: list[int], limit: int) -> str:
        return byte_text([token for token in tokens[:limit] if token != IM_END])

    def one(number: int, base: str) -> str | None:
        """Request `number`; None when it went as expected, else what went wrong."""
        if number % 5 == 4:
            kind = number // 5
            if kind % 3 == 2:
                what, data, status = RAW_BAD[kind % len(RAW_BAD)]
                got, body = raw_request(base, data)
            else:
                what, payload, status = BAD[kind % len(BAD)]
                path = "/chat/completions" if b"messages" in payload else "/completions"
                got, body = _post(base, path, payload)
            error = body.get("error") if isinstance(body, dict) else None
            if got != status or not isinstance(error, dict) or not error.get("message"):
                return f"bad request {what!r}: {got} {body}"
            return None
        prompt, limit, variant = PROMPTS[number % len(PROMPTS)], 2 + number % 4, number % 7
        if variant == 6:  # a chat, greedy
            text = CHATS[number % len(CHATS)]
            got, body = _post(base, "/chat/completions", json.dumps(
                {"messages": [{"role": "user", "content": text}], "max_tokens": 3, "temperature": 0}).encode())
            want = expected_text(chat_greedy[text], 3)
            answer = body["choices"][0]["message"]["content"] if got == 200 else None
            return None if answer == want else f"chat {text!r}: {got} {answer!r} != {want!r}"
        if variant == 5:  # sampled: only the form and the count can be checked
            got, body = _post(base, "/completions", json.dumps(
                {"prompt": prompt, "max_tokens": limit, "temperature": 0.9, "seed": number}).encode())
            ok = got == 200 and 1 <= body["usage"]["completion_tokens"] <= limit and \
                body["choices"][0]["finish_reason"] in ("stop", "length")
            return None if ok else f"sampled: {got} {body}"
        want = expected_text(greedy[prompt], limit)
        request = {"prompt": prompt, "max_tokens": limit, "temperature": 0}
        if variant in (1, 3):
            got, events = _post(base, "/completions", json.dumps({**request, "stream": True}).encode(), stream=True)
            answer = "".join(choice["text"] for event in events for choice in event["choices"]) \
                if got == 200 else None
            return None if answer == want else f"streamed {prompt!r}: {got} {answer!r} != {want!r}"
        count = 2 if variant == 2 else 1
        got, body = _post(base, "/completions", json.dumps({**request, "n": count}).encode())
        answers = [choice["text"] for choice in body["choices"]] if got == 200 else None
        return None if answers == [want] * count else f"{prompt!r} n={count}: {got} {answers!r} != {want!r}"

    with served(model_path, "--max-context", "48", "--parallel", "4", "--max-queue", "64") as base:
        start = time.perf_counter()
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            failures = [failure for failure in pool.map(lambda number: one(number, base), range(REQUESTS))
                        if failure is not None]
        elapsed = time.perf_counter() - start
        status, models = _post(base, "/completions", json.dumps({"prompt": "a", "max_tokens": 1}).encode())
    assert failures == []
    assert status == 200 and models["usage"]["completion_tokens"] == 1
    assert elapsed < DEADLINE, f"{REQUESTS} requests took {elapsed:.0f} s"
