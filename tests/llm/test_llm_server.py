"""`tiny llm --serve` tested with the `openai` Python client: models, completions and chat completions with and
without streaming (text equal to the numpy reference's greedy decoding), usage counts, queued concurrent requests,
and 4xx JSON errors for an unknown model, bad JSON and a context overflow."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from llm_fixtures import byte_text, greedy_reference, write_model

openai = pytest.importorskip("openai", reason="the server tests need the openai client: pip install openai")

IM_START, IM_END = 256, 257
MODEL = "served"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, model path) of a `tiny llm --serve 0` subprocess on a tiny byte-vocabulary model."""
    path = os.fspath(tmp_path_factory.mktemp("serve") / f"{MODEL}.gguf")
    write_model(path, architecture="llama", byte_vocabulary=True, dim=32, hidden=64, layers=1, heads=2, kv_heads=1,
                seed=5)
    process = subprocess.Popen([sys.executable, "-m", "tinycore.cli", "llm", "--model", path, "--serve", "0",
                                "--max-context", "48"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("serving"):
            process.kill()
            errors = process.stderr.read() if process.stderr else ""
            raise AssertionError(f"the server did not start: {line!r} {errors}")
        yield line.split(" on ", 1)[1].strip(), path
    finally:
        process.terminate()
        process.wait(timeout=30)


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
