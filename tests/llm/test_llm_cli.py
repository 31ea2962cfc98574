"""`tiny llm` on a tiny byte-vocabulary model: --prompt streams the text greedy decoding gives by the numpy reference,
with and without the chatml template; errors exit with status 2 and a message."""
from __future__ import annotations

import os

import pytest
from llm_fixtures import byte_text, greedy_reference, write_model

from tinycore.cli import main

IM_START, IM_END = 256, 257


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = os.fspath(tmp_path_factory.mktemp("llm") / "bytes.gguf")
    write_model(path, architecture="qwen2", byte_vocabulary=True, dim=32, hidden=64, layers=1, heads=2, kv_heads=1,
                seed=3)
    return path


def test_prompt_raw_streams_reference_text(model_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--raw --prompt 'hi' encodes to the bytes of 'hi' and prints the reference's greedy continuation."""
    assert main(["llm", "--model", model_path, "--prompt", "hi", "--raw", "--max-tokens", "6"]) == 0
    expected = greedy_reference(model_path, [ord("h"), ord("i")], 6, stop=(IM_END,))
    assert capsys.readouterr().out == byte_text(expected) + "\n"


def test_prompt_uses_chatml_template(model_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --raw the prompt is wrapped as <|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n."""
    assert main(["llm", "--model", model_path, "--prompt", "hi", "--max-tokens", "5"]) == 0
    ids = [IM_START, *b"user\nhi", IM_END, *b"\n", IM_START, *b"assistant\n"]
    expected = greedy_reference(model_path, ids, 5, stop=(IM_END,))
    assert capsys.readouterr().out == byte_text(expected) + "\n"


def test_benchmark_prints_rates(model_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--benchmark N reports prefill and decode rates and the time to first token."""
    assert main(["llm", "--model", model_path, "--benchmark", "3", "--max-context", "32"]) == 0
    out = capsys.readouterr().out
    assert "prefill:" in out and "tokens/s" in out and "decode: 3 tokens" in out and "time to first token" in out


def test_errors_exit_2_with_a_message(model_path: str, tmp_path: os.PathLike[str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file, a prompt longer than --max-context, a bad --max-tokens, --parallel or --max-queue each exit 2
    saying why."""
    assert main(["llm", "--model", os.path.join(os.fspath(tmp_path), "none.gguf"), "--prompt", "x"]) == 2
    assert "no model file" in capsys.readouterr().err
    assert main(["llm", "--model", model_path, "--prompt", "x" * 40, "--raw", "--max-context", "16"]) == 2
    assert "--max-context is 16" in capsys.readouterr().err
    assert main(["llm", "--model", model_path, "--max-tokens", "0", "--prompt", "x"]) == 2
    assert "--max-tokens must be at least 1" in capsys.readouterr().err
    assert main(["llm", "--model", model_path, "--serve", "0", "--parallel", "0"]) == 2
    assert "--parallel must be at least 1" in capsys.readouterr().err
    assert main(["llm", "--model", model_path, "--serve", "0", "--max-queue", "-1"]) == 2
    assert "--max-queue must be at least 0" in capsys.readouterr().err


def test_interactive_chat_keeps_the_conversation(model_path: str, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Two chat turns read from input: the second prompt holds the first question and the first answer in chatml,
    and each answer is the reference's greedy text for its whole conversation."""
    lines = iter(["hi", "ok", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert main(["llm", "--model", model_path, "--max-tokens", "4"]) == 0
    first_ids = [IM_START, *b"user\nhi", IM_END, *b"\n", IM_START, *b"assistant\n"]
    first = greedy_reference(model_path, first_ids, 4, stop=(IM_END,))
    # the history holds the answer's text (invalid UTF-8 already replaced by U+FFFD), encoded again
    answer = list(byte_text([token for token in first if token != IM_END]).encode("utf-8"))
    second_ids = [*first_ids[:-len(b"assistant\n") - 1], IM_START, *b"assistant\n", *answer, IM_END, *b"\n",
                  IM_START, *b"user\nok", IM_END, *b"\n", IM_START, *b"assistant\n"]
    second = greedy_reference(model_path, second_ids, 4, stop=(IM_END,))
    assert capsys.readouterr().out == byte_text(first) + "\n" + byte_text(second) + "\n"
