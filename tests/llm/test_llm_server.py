"""`tiny llm --serve` tested with the `openai` Python client and raw HTTP: models, completions and chat completions
with and without streaming (text equal to the numpy reference's greedy decoding), usage counts, concurrent requests,
`n` choices, logprobs against the reference's log-softmax, text-part content, and 4xx JSON errors for an unknown
model, bad JSON, a context overflow, an unknown role, malformed headers and a full queue (429); a port in use is a
one-line error."""
from __future__ import annotations

import json
import os
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import llm_reference
import numpy
import pytest
from llm_fixtures import byte_text, greedy_reference, raw_request, served, write_model

from tinycore.cli import main

openai = pytest.importorskip("openai", reason="the server tests need the openai client: pip install openai")

IM_START, IM_END = 256, 257
MODEL = "served"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, model path) of a `tiny llm --serve 0` subprocess on a tiny byte-vocabulary model."""
    path = os.fspath(tmp_path_factory.mktemp("serve") / f"{MODEL}.gguf")
    write_model(path, architecture="llama", byte_vocabulary=True, dim=32, hidden=64, layers=1, heads=2, kv_heads=1,
                seed=5)
    with served(path, "--max-context", "48") as base:
        yield base, path


@pytest.fixture(scope="module")
def client(server: tuple[str, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0], api_key="unused", max_retries=0, timeout=120)


def test_models_lists_the_file(client: openai.OpenAI) -> None:
    """GET /v1/models names the model after its file."""
    assert [model.id for model in client.models.list().data] == [MODEL]


def test_completion_plain_and_streamed(client: openai.OpenAI, server: tuple[str, str]) -> None:
    """A completion of 'ab' (greedy, 6 tokens) is the reference's text, whole and streamed, with usage counts."""
    expected = greedy_reference(server[1], [ord("a"), ord("b")], 6, stop=(IM_END,))
    response = client.completions.create(model=MODEL, prompt="ab", max_tokens=6, temperature=0)
    assert response.choices[0].text == byte_text(expected)
    assert response.usage is not None and response.usage.prompt_tokens == 2
    assert response.usage.completion_tokens == len(expected)
    assert response.choices[0].finish_reason == ("stop" if IM_END in expected else "length")
    chunks = list(client.completions.create(model=MODEL, prompt="ab", max_tokens=6, temperature=0, stream=True))
    assert "".join(chunk.choices[0].text for chunk in chunks) == byte_text(expected)
    assert chunks[-1].choices[0].finish_reason == response.choices[0].finish_reason


def test_chat_plain_and_streamed(client: openai.OpenAI, server: tuple[str, str]) -> None:
    """A chat reply follows the chatml prompt of its messages; streamed deltas join to the same text; the usage
    chunk comes when asked for."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    ids = [IM_START, *b"system\ns", IM_END, *b"\n", IM_START, *b"user\nhi", IM_END, *b"\n", IM_START,
           *b"assistant\n"]
    expected = greedy_reference(server[1], ids, 5, stop=(IM_END,))
    response = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0)
    assert response.choices[0].message.role == "assistant"
    assert response.choices[0].message.content == byte_text(expected)
    assert response.usage is not None and response.usage.prompt_tokens == len(ids)
    stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == byte_text(expected)
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == len(ids) + len(expected)


def test_concurrent_requests_are_queued(client: openai.OpenAI, server: tuple[str, str]) -> None:
    """Three requests at once all complete, each with the text it would get alone."""
    expected = byte_text(greedy_reference(server[1], [ord("x")], 4, stop=(IM_END,)))
    results: list[str] = []

    def ask() -> None:
        response = client.completions.create(model=MODEL, prompt="x", max_tokens=4, temperature=0)
        results.append(response.choices[0].text)
    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == [expected] * 3


def test_errors_are_4xx_json(client: openai.OpenAI, server: tuple[str, str]) -> None:
    """Unknown model: 404 model_not_found; context overflow: 400 context_length_exceeded; bad JSON: 400 with an
    OpenAI error object; an unknown route: 404."""
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="gpt-9", prompt="a", max_tokens=2)
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as overflow:
        client.completions.create(model=MODEL, prompt="a" * 40, max_tokens=20)
    assert overflow.value.code == "context_length_exceeded"
    for body, path, status in ((b"{not json", "/completions", 400), (b"{}", "/nothing", 404),
                               (b'{"prompt": 5}', "/completions", 400)):
        request = urllib.request.Request(server[0] + path, data=body, headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=60)
        assert error.value.code == status
        assert "message" in json.loads(error.value.read())["error"]


def _post(base: str, path: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _events(base: str, path: str, body: dict[str, object]) -> list[dict[str, object]]:
    """The data objects of a streamed response (without the final [DONE])."""
    request = urllib.request.Request(base + path, data=json.dumps({**body, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        lines = response.read().decode().split("\n\n")
    data = [line.removeprefix("data: ") for line in lines if line]
    assert data[-1] == "[DONE]"
    return [json.loads(line) for line in data[:-1]]


def test_n_choices(server: tuple[str, str]) -> None:
    """n=2 at temperature 0 gives two choices (indexes 0 and 1), each the reference's greedy text, whole and
    streamed, and usage counts both choices' tokens; n outside 1..16 is a 400 naming 'n'."""
    base, path = server
    expected = greedy_reference(path, [ord("x"), ord("y")], 5, stop=(IM_END,))
    status, body = _post(base, "/completions", {"prompt": "xy", "max_tokens": 5, "temperature": 0, "n": 2})
    assert status == 200
    assert [(choice["index"], choice["text"]) for choice in body["choices"]] == [(0, byte_text(expected)),
                                                                                 (1, byte_text(expected))]
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 2 * len(expected),
                             "total_tokens": 2 + 2 * len(expected)}
    texts = {0: "", 1: ""}
    finishes = {}
    for event in _events(base, "/completions", {"prompt": "xy", "max_tokens": 5, "temperature": 0, "n": 2}):
        for choice in event["choices"]:
            texts[choice["index"]] += choice["text"]
            if choice["finish_reason"] is not None:
                finishes[choice["index"]] = choice["finish_reason"]
    assert texts == {0: byte_text(expected), 1: byte_text(expected)}
    assert finishes == {0: body["choices"][0]["finish_reason"], 1: body["choices"][1]["finish_reason"]}
    for n in (0, 17, 1.5):
        status, body = _post(base, "/completions", {"prompt": "xy", "n": n})
        assert status == 400 and body["error"]["param"] == "n"


def test_content_parts_and_roles(server: tuple[str, str]) -> None:
    """Content as a list of text parts is their texts joined by newlines, and the 'developer' role is written as
    system; an unknown role and a non-text part are 400 JSON naming 'messages'."""
    base, path = server
    messages = [{"role": "developer", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}]
    ids = [IM_START, *b"system\ns", IM_END, *b"\n", IM_START, *b"user\nh\ni", IM_END, *b"\n", IM_START,
           *b"assistant\n"]
    expected = greedy_reference(path, ids, 4, stop=(IM_END,))
    status, body = _post(base, "/chat/completions", {"messages": messages, "max_tokens": 4, "temperature": 0})
    assert status == 200 and body["choices"][0]["message"]["content"] == byte_text(expected)
    assert body["usage"]["prompt_tokens"] == len(ids)
    for message, words in (({"role": "wizard", "content": "hi"}, "role 'wizard'; roles: system, developer, user"),
                           ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                            "only text parts are supported"),
                           ({"role": "user"}, "has no 'content'")):
        status, body = _post(base, "/chat/completions", {"messages": [message]})
        assert status == 400 and body["error"]["param"] == "messages" and words in body["error"]["message"]


def _log_softmax(logits: numpy.ndarray) -> numpy.ndarray:
    shifted = logits.astype(numpy.float64) - logits.max()
    return shifted - numpy.log(numpy.exp(shifted).sum())


def test_logprobs(server: tuple[str, str]) -> None:
    """Greedy completions with logprobs=2: each token's log-probability is the reference's log-softmax at the
    chosen token (1e-3), its two alternatives start with the chosen token itself, and text offsets count the
    tokens' characters; streamed chunks carry the same entries between them; chat's logprobs/top_logprobs give
    the same numbers with the tokens' bytes."""
    base, path = server
    prompt = [ord("a"), ord("b")]
    expected = [token for token in greedy_reference(path, prompt, 4, stop=(IM_END,)) if token != IM_END]
    reference = [_log_softmax(llm_reference.logits(path, prompt + expected[:step])[-1])
                 for step in range(len(expected))]
    status, body = _post(base, "/completions", {"prompt": "ab", "max_tokens": 4, "temperature": 0, "logprobs": 2})
    assert status == 200
    logprobs = body["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(expected)
    assert logprobs["tokens"] == [bytes([token]).decode("utf-8", errors="replace") for token in expected]
    numpy.testing.assert_allclose(logprobs["token_logprobs"], [row[token] for row, token in
                                                                zip(reference, expected, strict=True)], atol=1e-3)
    for row, token, top in zip(reference, expected, logprobs["top_logprobs"], strict=True):
        assert len(top) <= 2 and list(top)[0] == bytes([token]).decode("utf-8", errors="replace")
        assert abs(list(top.values())[0] - row.max()) < 1e-3
    assert logprobs["text_offset"] == list(range(len(expected)))
    streamed = [choice["logprobs"] for event in _events(base, "/completions", {"prompt": "ab", "max_tokens": 4,
                                                                               "temperature": 0, "logprobs": 2})
                for choice in event["choices"] if choice["logprobs"] is not None]
    assert [token for part in streamed for token in part["tokens"]] == logprobs["tokens"]
    assert [value for part in streamed for value in part["token_logprobs"]] == logprobs["token_logprobs"]
    assert [offset for part in streamed for offset in part["text_offset"]] == logprobs["text_offset"]
    status, body = _post(base, "/chat/completions", {"messages": [{"role": "user", "content": "ab"}],
                                                     "max_tokens": 3, "temperature": 0, "logprobs": True,
                                                     "top_logprobs": 1})
    assert status == 200
    content = body["choices"][0]["logprobs"]["content"]
    ids = [IM_START, *b"user\nab", IM_END, *b"\n", IM_START, *b"assistant\n"]
    chat_expected = [token for token in greedy_reference(path, ids, 3, stop=(IM_END,)) if token != IM_END]
    assert [entry["bytes"] for entry in content] == [[token] for token in chat_expected]
    for step, entry in enumerate(content):
        row = _log_softmax(llm_reference.logits(path, ids + chat_expected[:step])[-1])
        assert abs(entry["logprob"] - row[chat_expected[step]]) < 1e-3
        assert [alternative["bytes"] for alternative in entry["top_logprobs"]] == [[chat_expected[step]]]
    status, body = _post(base, "/chat/completions", {"messages": [{"role": "user", "content": "ab"}],
                                                     "top_logprobs": 2})
    assert status == 400 and body["error"]["param"] == "top_logprobs"


def test_malformed_requests_get_json(server: tuple[str, str]) -> None:
    """A Content-Length that is not a number or negative: 400; a chunked body without a length: 411; a request line
    that is not HTTP: 400; an unsupported method: 501; each an OpenAI error object."""
    base = server[0]
    body = b'{"prompt": "a", "max_tokens": 1}'
    for data, status in (
            (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n" + body, 400),
            (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n" + body, 400),
            (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
            (b"GARBAGE\r\n\r\n", 400),
            (b"PUT /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 501)):
        got, error = raw_request(base, data)
        assert got == status, data
        assert isinstance(error["error"], dict) and error["error"]["message"], data
    got, error = raw_request(base, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    assert "Content-Length header must be a number" in error["error"]["message"]


def test_port_in_use_is_one_line(server: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """Serving on a port another socket holds exits 2 with one line naming the address, no traceback, before the
    model is loaded (a missing model file is not what it reports); a port past 65535 likewise."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        port = holder.getsockname()[1]
        assert main(["llm", "--model", server[1], "--serve", str(port), "--max-context", "16"]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and f"cannot serve on 127.0.0.1:{port}" in error and "Traceback" not in error
        assert main(["llm", "--model", server[1] + ".missing", "--serve", str(port)]) == 2
        assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err
    finally:
        holder.close()
    assert main(["llm", "--model", server[1], "--serve", "70000"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cannot serve on 127.0.0.1:70000" in error


def test_full_queue_is_429(tmp_path_factory: pytest.TempPathFactory) -> None:
    """With one slot and no room to wait (--parallel 1 --max-queue 0), a request that comes while another streams
    gets 429 with a rate_limit_error; once the first is done, the next is served; n=2, which could never fit, is a
    400 naming 'n'."""
    path = os.fspath(tmp_path_factory.mktemp("busy") / "busy.gguf")
    # no stop token, and room for 500 tokens: the first request runs far longer than the second takes to arrive
    write_model(path, dim=32, hidden=64, layers=1, heads=2, kv_heads=1, vocab=40, seed=2, context=512)
    with served(path, "--parallel", "1", "--max-queue", "0", "--max-context", "512") as base:
        request = urllib.request.Request(base + "/completions", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"prompt": [1, 2], "max_tokens": 500, "temperature": 0,
                                                          "stream": True}).encode())
        with urllib.request.urlopen(request, timeout=120) as stream:
            assert stream.readline().startswith(b"data: ")  # the first token: the one slot is busy
            status, body = _post(base, "/completions", {"prompt": [3], "max_tokens": 2})
            assert status == 429, body
            assert body["error"]["type"] == "rate_limit_error" and body["error"]["code"] == "queue_full"
            stream.read()
        status, body = _post(base, "/completions", {"prompt": [3], "max_tokens": 2, "temperature": 0})
        assert status == 200 and body["usage"]["completion_tokens"] == 2
        status, body = _post(base, "/completions", {"prompt": [3], "max_tokens": 2, "n": 2})
        assert status == 400 and body["error"]["param"] == "n" and "(1: --parallel plus --max-queue)" in \
            body["error"]["message"]


def test_stalled_body_is_408(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A body that stops before its Content-Length is answered 408 JSON once the socket timeout (here 1 s) passes,
    and the connection is closed; the server goes on serving."""
    from tinycore.llm.cli import load_session
    from tinycore.llm.server import bind, serve
    path = os.fspath(tmp_path_factory.mktemp("stall") / "stall.gguf")
    write_model(path, dim=32, hidden=64, layers=1, heads=2, kv_heads=1, vocab=40, seed=4)
    session, name = load_session(path, 16, None)
    httpd = bind("127.0.0.1", 0)
    thread = threading.Thread(target=serve, args=(session, name, 0), daemon=True,
                              kwargs={"httpd": httpd, "socket_timeout": 1.0})
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        status, body = raw_request(base, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
                                         b'{"pro', timeout=30)
        assert status == 408 and "stopped after 5 of the 100 bytes" in body["error"]["message"]
        status, body = _post(base, "/completions", {"prompt": [1, 2], "max_tokens": 2, "temperature": 0})
        assert status == 200 and body["usage"]["completion_tokens"] == 2
    finally:
        httpd.shutdown()
        thread.join(timeout=60)
