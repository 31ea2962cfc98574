"""Prefill's kernels do not depend on where a prompt starts or, within a power of two, on how long it is: a server
whose every request has a new prompt length compiled a model's worth of kernels before each first token. The logits
stay the numpy reference's (tests/llm/llm_reference.py), padding and prefix reuse included."""
from __future__ import annotations

import os

import llm_reference
import numpy
import pytest
from llm_fixtures import write_model

from tinycore.device.compiler import Compiler
from tinycore.llm.model import Transformer


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = os.fspath(tmp_path_factory.mktemp("prefill_shapes") / "model.gguf")
    write_model(path, architecture="llama", dim=32, hidden=64, layers=2, heads=4, kv_heads=2, vocab=40, seed=5)
    return path


def _compiled_sources(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every source handed to a compiler from now on (whether its binary was cached or not)."""
    sources: list[str] = []
    original = Compiler.compile_cached

    def recording(self: Compiler, src: str) -> bytes:
        sources.append(src)
        return original(self, src)
    monkeypatch.setattr(Compiler, "compile_cached", recording)
    return sources


def test_new_lengths_starts_and_slots_reuse_the_kernels(model_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After one prompt of 19 tokens, prompts of 17 to 23 tokens at other starts (after the cached ones, and inside
    them, as a reused prefix) and in the other slot's row compile nothing new; each one's last logits equal the
    reference's for its row's whole sequence."""
    model = Transformer.from_gguf(model_path, max_context=64, max_batch=2)
    generator = numpy.random.default_rng(3)
    rows: list[list[int]] = [[int(token) for token in generator.integers(3, 40, 19)], []]
    sources = _compiled_sources(monkeypatch)
    model.prefill_slot(0, rows[0])
    first_sources = set(sources)
    for slot, start, length in ((0, 19, 17), (1, 0, 21), (0, 30, 23), (0, 5, 20), (1, 21, 18)):
        ids = [int(token) for token in generator.integers(3, 40, length)]
        logits = model.prefill_slot(slot, ids, start)
        rows[slot] = rows[slot][:start] + ids
        expected = llm_reference.logits(model_path, rows[slot])[-1]
        numpy.testing.assert_allclose(logits, expected, rtol=1e-3, atol=1e-3)
    new = set(sources) - first_sources
    assert not new, f"{len(new)} kernel sources compiled for new prefill lengths, starts and slots:\n" + \
        "\n".join(sorted(line for source in new for line in source.splitlines() if line.startswith("void ")))


def test_generate_after_a_padded_prefill_matches_the_reference(model_path: str) -> None:
    """A prompt of 5 tokens runs as a chunk of 8; the padding's keys and values sit past the prompt, and the greedy
    tokens after it are the reference's (each decode step overwrites a padded position before attending to it)."""
    model = Transformer.from_gguf(model_path, max_context=32)
    prompt = [3, 9, 14, 2, 30]
    tokens = list(model.generate(prompt, 6))
    expected: list[int] = []
    for _ in range(6):
        expected.append(int(numpy.argmax(llm_reference.logits(model_path, prompt + expected)[-1])))
    assert tokens == expected


def test_a_chunk_that_would_pad_past_the_context_runs_unpadded(model_path: str) -> None:
    """Near the end of the context the padding would not fit: the chunk runs at its own length, same logits."""
    model = Transformer.from_gguf(model_path, max_context=24)
    ids = [int(token) for token in numpy.random.default_rng(8).integers(3, 40, 21)]  # 21 -> 32 would pass 24
    logits = model.prefill_slot(0, ids)
    numpy.testing.assert_allclose(logits, llm_reference.logits(model_path, ids)[-1], rtol=1e-3, atol=1e-3)
