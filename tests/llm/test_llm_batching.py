"""Continuous batching against the numpy reference (tests/llm/llm_reference.py, whole sequence each step, no
cache): `decode_slots` with every row at a position of its own, `prefill_slot` into a row, and the BatchScheduler,
whose requests (arriving at different times, of different lengths, with stop tokens, cancelled, over the queue
cap) each get the tokens greedy decoding gives them alone."""
from __future__ import annotations

import os
import pathlib
import queue

import llm_reference
import numpy
import pytest
from llm_fixtures import greedy_reference, write_model

from tinycore.llm.batching import (
    BatchScheduler,
    ErrorEvent,
    Event,
    FinishEvent,
    GenerationRequest,
    QueueFullError,
    TokenEvent,
)
from tinycore.llm.model import Transformer

TIMEOUT = 120


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = os.fspath(tmp_path_factory.mktemp("batching") / "model.gguf")
    write_model(path, architecture="llama", dim=32, hidden=64, layers=2, heads=4, kv_heads=2, vocab=40, seed=11)
    return path


def test_decode_slots_rows_at_their_own_positions(model_path: str) -> None:
    """Three rows: row 2 prefilled with 6 tokens, rows 0 and 1 fed their prompts a token per step; at every step
    each row's logits equal the reference's last-position logits of that row's sequence so far."""
    model = Transformer.from_gguf(model_path, max_context=32, max_batch=3)
    prompts = [[3, 4, 5], [9], [1, 2, 3, 4, 5, 6]]
    first = model.prefill_slot(2, prompts[2])
    numpy.testing.assert_allclose(first, llm_reference.logits(model_path, prompts[2])[-1], rtol=1e-3, atol=1e-3)
    written: list[list[int]] = [[], [], list(prompts[2])]
    pending = [list(prompts[0]), list(prompts[1]), [int(numpy.argmax(first))]]
    positions = [0, 0, len(prompts[2])]
    for _ in range(6):
        logits = model.decode_slots([row[0] for row in pending], positions)
        for row in range(3):
            written[row].append(pending[row].pop(0))
            positions[row] += 1
            expected = llm_reference.logits(model_path, written[row])[-1]
            numpy.testing.assert_allclose(logits[row], expected, rtol=1e-3, atol=1e-3)
            if not pending[row]:
                pending[row] = [int(numpy.argmax(logits[row]))]


def test_slot_arguments_are_checked(model_path: str) -> None:
    """A slot outside the cache's rows, more rows than max_batch and a position past the context raise ValueError
    saying what is allowed."""
    model = Transformer.from_gguf(model_path, max_context=16, max_batch=2)
    with pytest.raises(ValueError, match="slot 2 is not a row of the KV cache, which holds 2"):
        model.prefill_slot(2, [1])
    with pytest.raises(ValueError, match="decode_slots takes 1..2 rows"):
        model.decode_slots([1, 2, 3], [0, 0, 0])
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 16\)"):
        model.decode_slots([1], [16])


def _collect(events: queue.Queue[Event], count: int,
             already: tuple[Event, ...] = ()) -> tuple[dict[int, list[int]], dict[int, str]]:
    """The tokens and finish reasons of `count` sequences, from the events `already` read and then the queue's,
    until each has finished."""
    tokens: dict[int, list[int]] = {index: [] for index in range(count)}
    reasons: dict[int, str] = {}
    pending = list(already)
    while len(reasons) < count:
        event = pending.pop(0) if pending else events.get(timeout=TIMEOUT)
        if isinstance(event, ErrorEvent):
            raise AssertionError(event.message)
        if isinstance(event, TokenEvent):
            tokens[event.index].append(event.token)
        elif isinstance(event, FinishEvent):
            reasons[event.index] = event.reason
    return tokens, reasons


def test_scheduler_matches_one_at_a_time(model_path: str) -> None:
    """Five requests on three slots, submitted in two waves (the second while the first runs): prompts short (fed
    through the steps) and long (prefilled, step_prefill=4), different max_tokens, one with a stop token. Each gets
    exactly the reference's greedy tokens, finishing 'stop' at its stop token or 'length'; steps ran more than one
    sequence at once."""
    model = Transformer.from_gguf(model_path, max_context=32, max_batch=3)
    scheduler = BatchScheduler(model, max_queued=8, step_prefill=4)
    try:
        prompts = [[3, 4, 5], [9], [1, 2, 3, 4, 5, 6, 7], [8, 8], [2, 7, 1, 8, 2, 8]]
        lengths = [8, 5, 6, 9, 4]
        stop_after = greedy_reference(model_path, prompts[3], 9)[3]  # request 3 stops at its fourth token
        expected = [greedy_reference(model_path, prompt, length, stop=(stop_after,) if index == 3 else ())
                    for index, (prompt, length) in enumerate(zip(prompts, lengths, strict=True))]
        events: queue.Queue[Event] = queue.Queue()
        requests = [GenerationRequest(prompt, length, events, index=index,
                                      stop_ids=frozenset({stop_after}) if index == 3 else frozenset())
                    for index, (prompt, length) in enumerate(zip(prompts, lengths, strict=True))]
        scheduler.submit(requests[:2])
        first = events.get(timeout=TIMEOUT)  # the first wave is running
        scheduler.submit(requests[2:])
        tokens, reasons = _collect(events, 5, (first,))
        assert [tokens[index] for index in range(5)] == expected
        assert reasons[3] == "stop" and len(expected[3]) == 4
        assert all(reasons[index] == "length" for index in (0, 1, 2, 4))
        assert scheduler.largest_batch >= 2
    finally:
        scheduler.close()


def test_scheduler_reuses_a_slots_prefix_and_cancels(model_path: str) -> None:
    """A request that continues a finished one (its prompt and answer plus new tokens) runs in the same slot and
    gets the reference's tokens for the whole sequence; a request cancelled while waiting finishes 'cancelled'
    without tokens while another runs on unaffected, and one cancelled while running stops early."""
    model = Transformer.from_gguf(model_path, max_context=64, max_batch=2)
    scheduler = BatchScheduler(model, max_queued=4, step_prefill=2)
    try:
        events: queue.Queue[Event] = queue.Queue()
        scheduler.submit([GenerationRequest([5, 6, 7], 4, events)])
        answer = _collect(events, 1)[0][0]
        assert answer == greedy_reference(model_path, [5, 6, 7], 4)
        follow = [5, 6, 7, *answer, 1, 2]
        scheduler.submit([GenerationRequest(follow, 3, events)])
        assert _collect(events, 1)[0][0] == greedy_reference(model_path, follow, 3)
        assert scheduler.slot_tokens[0][:len(follow)] == follow  # the same slot, holding the whole conversation
        kept, waiting = GenerationRequest([4], 6, events, index=0), GenerationRequest([3], 20, events, index=1)
        waiting.cancelled = True  # cancelled before it got a slot
        scheduler.submit([kept, waiting])
        tokens, reasons = _collect(events, 2)
        assert reasons == {0: "length", 1: "cancelled"} and tokens[1] == []
        assert tokens[0] == greedy_reference(model_path, [4], 6)
        running = GenerationRequest([3], 60, events)
        scheduler.submit([running])
        first = events.get(timeout=TIMEOUT)
        running.cancelled = True  # cancelled while it runs: it ends at the next step, far before 60 tokens
        tokens, reasons = _collect(events, 1, (first,))
        assert reasons == {0: "cancelled"} and 1 <= len(tokens[0]) < 60
        assert tokens[0] == greedy_reference(model_path, [3], len(tokens[0]))
    finally:
        scheduler.close()


def test_queue_cap(model_path: str) -> None:
    """With one slot and room for one waiting sequence, three at once are refused (QueueFullError, nothing queued)
    and two are taken."""
    model = Transformer.from_gguf(model_path, max_context=16, max_batch=1)
    scheduler = BatchScheduler(model, max_queued=1)
    try:
        events: queue.Queue[Event] = queue.Queue()
        requests = [GenerationRequest([1], 2, events, index=index) for index in range(3)]
        with pytest.raises(QueueFullError, match="which holds 1"):
            scheduler.submit(requests)
        scheduler.submit(requests[:2])
        tokens, reasons = _collect(events, 2)
        assert tokens[0] == tokens[1] == greedy_reference(model_path, [1], 2)
    finally:
        scheduler.close()


def test_free_row_inside_the_batch_keeps_its_prefix(model_path: str) -> None:
    """Slot 0 finishes first while slot 1 runs on, so row 0 rides along in the steps as a free row; a later request
    that continues slot 0's sequence reuses its cache and still gets the reference's tokens (the free row's
    throw-away writes land past the positions it keeps)."""
    model = Transformer.from_gguf(model_path, max_context=32, max_batch=2)
    scheduler = BatchScheduler(model, max_queued=4, step_prefill=2)
    try:
        events: queue.Queue[Event] = queue.Queue()
        short, long = GenerationRequest([5, 6, 7], 2, events, index=0), GenerationRequest([9], 12, events, index=1)
        scheduler.submit([short, long])
        tokens, _ = _collect(events, 2)
        follow = [5, 6, 7, *tokens[0], 4]
        scheduler.submit([GenerationRequest(follow, 4, events)])
        assert _collect(events, 1)[0][0] == greedy_reference(model_path, follow, 4)
        assert scheduler.slot_tokens[0][:len(follow)] == follow
    finally:
        scheduler.close()


def test_long_prompt_is_prefilled_between_steps(model_path: str) -> None:
    """A 12-token prompt prefilled 4 tokens at a time (three chunks, one before each step) beside a 1-token prompt:
    the short request's first two tokens come before the long one's first (which follows its third chunk), and both
    get the reference's greedy tokens."""
    model = Transformer.from_gguf(model_path, max_context=32, max_batch=2)
    scheduler = BatchScheduler(model, max_queued=4, step_prefill=2, prefill_chunk=4)
    try:
        events: queue.Queue[Event] = queue.Queue()
        long_prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        scheduler.submit([GenerationRequest([9], 6, events, index=0),
                          GenerationRequest(long_prompt, 3, events, index=1)])
        order: list[int] = []
        tokens: dict[int, list[int]] = {0: [], 1: []}
        finished = 0
        while finished < 2:
            event = events.get(timeout=TIMEOUT)
            if isinstance(event, TokenEvent):
                order.append(event.index)
                tokens[event.index].append(event.token)
            finished += isinstance(event, FinishEvent)
        assert order[:3] == [0, 0, 1]
        assert tokens == {0: greedy_reference(model_path, [9], 6), 1: greedy_reference(model_path, long_prompt, 3)}
    finally:
        scheduler.close()


def test_steps_run_whole_row_groups(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With Q4_0 weights (whose lane form converts a block once per group of 4 rows) five busy slots run as a
    step of 8 rows, the three extra rows throw-away work; every request still gets the reference's greedy tokens.
    Q8_0 weights (no row groups), or a cache of fewer rows than the rounded count, keep the busy rows' count."""
    path = os.fspath(tmp_path / "q4.gguf")
    write_model(path, architecture="llama", matrix_type="Q4_0", dim=32, hidden=64, layers=2, heads=4, kv_heads=2,
                vocab=40, seed=13)
    model = Transformer.from_gguf(path, max_context=32, max_batch=8)
    assert [model.step_rows(rows) for rows in range(1, 9)] == [1, 2, 3, 4, 8, 8, 8, 8]
    assert Transformer.from_gguf(path, max_context=32, max_batch=6).step_rows(5) == 5
    q8_path = os.fspath(tmp_path / "q8.gguf")
    write_model(q8_path, architecture="llama", matrix_type="Q8_0", dim=32, hidden=64, layers=1, heads=4, kv_heads=2,
                vocab=40, seed=13)
    assert Transformer.from_gguf(q8_path, max_context=32, max_batch=8).step_rows(5) == 5
    seen: list[int] = []
    decode = model.decode_slots
    monkeypatch.setattr(model, "decode_slots", lambda tokens, positions: seen.append(len(tokens)) or
                        decode(tokens, positions))
    scheduler = BatchScheduler(model, max_queued=8, step_prefill=4)
    try:
        prompts = [[3, 4], [9], [1, 2, 3], [8, 8], [2, 7, 1]]
        events: queue.Queue[Event] = queue.Queue()
        scheduler.submit([GenerationRequest(prompt, 5, events, index=index) for index, prompt in enumerate(prompts)])
        tokens, _ = _collect(events, 5)
        assert [tokens[index] for index in range(5)] == [greedy_reference(path, prompt, 5) for prompt in prompts]
        assert 8 in seen and all(rows <= 4 or rows == 8 for rows in seen)
    finally:
        scheduler.close()
