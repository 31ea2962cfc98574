"""Continuous batching: one thread runs the model for every request at once.

The KV cache holds `model.max_batch` slots (rows), each one sequence at positions of its own. A request waits in a
bounded queue until a slot is free, then its prompt goes in: a long remainder (more than `step_prefill` tokens) is
prefilled into its slot one chunk (`prefill_chunk` tokens) between two decode steps, so the other sequences wait
one chunk per step rather than the whole prompt; a short one is fed one token per step. Every step then runs the
jitted decode of rows 0..r (r the highest busy slot, or above it where whole row groups run faster:
`Transformer.step_rows`; a free or prefilling row in between computes a throw-away token just past the positions
it keeps) with each row's token at its own position (`Transformer.decode_slots`),
and each request samples from its row with its own settings and generator. A request leaves its slot when it
stops, reaches its token limit or is cancelled, and a waiting one takes the slot before the next step: the batch
grows and shrinks between steps. A slot keeps the tokens of its last sequence, so a request that repeats them (the
next turn of a chat) is admitted to that slot and only its new tokens run.

Consumers read `TokenEvent`s and a final `FinishEvent` (or an `ErrorEvent`) from the queue they passed in; text,
stop strings and the HTTP side are theirs (tinycore.llm.server).
"""
from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy

from tinycore.llm.model import PREFILL_CHUNK, Transformer, sample

STEP_PREFILL = 16
"""Prompt remainders of at most this many tokens are fed through the shared decode steps instead of prefilled alone
(chunked prefill is faster per token for long prompts; short ones cost a few steps and stall nobody)."""


@dataclass
class TokenEvent:
    """A token sampled for sequence `index`, with its log-probability and the most likely alternatives (token,
    log-probability) when logprobs were asked for."""

    index: int
    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class FinishEvent:
    """Sequence `index` ended: reason 'stop' (a stop token), 'length' (max_tokens) or 'cancelled'."""

    index: int
    reason: str


@dataclass
class ErrorEvent:
    """Sequence `index` failed: the model raised `message`."""

    index: int
    message: str


Event = TokenEvent | FinishEvent | ErrorEvent


@dataclass
class GenerationRequest:
    """One sequence to generate. `events` receives its events (several sequences, told apart by `index`, may share
    one queue); setting `cancelled` ends it before its next step."""

    prompt: list[int]
    max_tokens: int
    events: queue.Queue[Event]
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_ids: frozenset[int] = frozenset()
    logprobs: int | None = None
    index: int = 0
    cancelled: bool = False
    # the scheduler's state
    pending: list[int] = field(default_factory=list)
    prefilling: list[int] = field(default_factory=list)
    position: int = 0
    generated: int = 0
    generator: numpy.random.Generator | None = None


class QueueFullError(Exception):
    """More requests wait for a slot than the queue's cap allows."""


class BatchScheduler:
    """Runs `model` for every submitted GenerationRequest on a thread of its own, up to model.max_batch at once and
    `max_queued` more waiting (submit raises QueueFullError beyond that). Prompt remainders longer than
    `step_prefill` tokens are prefilled `prefill_chunk` tokens between two steps."""

    def __init__(self, model: Transformer, max_queued: int = 64, step_prefill: int = STEP_PREFILL,
                 prefill_chunk: int = PREFILL_CHUNK):
        if max_queued < 0 or step_prefill < 0 or prefill_chunk < 1:
            raise ValueError(f"the scheduler needs max_queued >= 0, step_prefill >= 0 and prefill_chunk >= 1; got "
                             f"{max_queued}, {step_prefill}, {prefill_chunk}")
        self.model, self.max_queued, self.step_prefill = model, max_queued, step_prefill
        self.prefill_chunk = prefill_chunk
        self.condition = threading.Condition()
        self.waiting: deque[GenerationRequest] = deque()
        self.active: dict[int, GenerationRequest] = {}
        self.slot_tokens: list[list[int]] = [[] for _ in range(model.max_batch)]  # what each slot's cache holds
        self.closed = False
        self.steps = 0
        self.largest_batch = 0  # the most sequences one step has advanced (how much batching happened)
        self.thread = threading.Thread(target=self._loop, name="llm-batch-scheduler", daemon=True)
        self.thread.start()

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        """Queue `requests` (all or none): QueueFullError when more than max_queued would wait for a slot."""
        with self.condition:
            free = self.model.max_batch - len(self.active)
            if len(self.waiting) + len(requests) - free > self.max_queued:
                raise QueueFullError(f"{len(self.waiting)} sequence(s) already wait for one of the "
                                     f"{self.model.max_batch} slots and {len(requests)} more would exceed the queue, "
                                     f"which holds {self.max_queued}")
            self.waiting.extend(requests)
            self.condition.notify_all()

    def close(self) -> None:
        """Stop the thread after its current step; waiting and running requests get an ErrorEvent."""
        with self.condition:
            self.closed = True
            self.condition.notify_all()
        self.thread.join(timeout=60)

    def _loop(self) -> None:
        while True:
            with self.condition:
                self.condition.wait_for(lambda: self.closed or bool(self.active) or bool(self.waiting))
                if self.closed:
                    for request in [*self.waiting, *self.active.values()]:
                        request.events.put(ErrorEvent(request.index, "the server is shutting down"))
                    return
                for request in [request for request in self.waiting if request.cancelled]:
                    self.waiting.remove(request)
                    request.events.put(FinishEvent(request.index, "cancelled"))
                admitted = []
                while self.waiting and len(self.active) < self.model.max_batch:
                    request = self.waiting.popleft()
                    slot = self._slot_for(request.prompt)
                    self.active[slot] = request
                    admitted.append(slot)
            try:
                for slot in admitted:
                    self._start(slot)
                self._prefill_chunk()
                self._step()
            except Exception as error:  # noqa: BLE001 - any model failure fails the running requests, not the server
                with self.condition:
                    for slot, request in list(self.active.items()):
                        request.events.put(ErrorEvent(request.index, f"{type(error).__name__}: {error}"))
                        self.slot_tokens[slot] = []
                    self.active.clear()

    def _slot_for(self, prompt: list[int]) -> int:
        """The free slot whose cached tokens share the longest prefix with `prompt` (the lowest on ties, which keeps
        the batch's rows few)."""
        best, best_shared = -1, -1
        for slot in range(self.model.max_batch):
            if slot in self.active:
                continue
            shared = _shared_prefix(self.slot_tokens[slot], prompt)
            if shared > best_shared:
                best, best_shared = slot, shared
        return best

    def _start(self, slot: int) -> None:
        request = self.active[slot]
        request.generator = numpy.random.default_rng(request.seed)
        reused = _shared_prefix(self.slot_tokens[slot], request.prompt)
        self.slot_tokens[slot] = self.slot_tokens[slot][:reused]
        remainder = request.prompt[reused:]
        request.position = reused
        if len(remainder) > self.step_prefill:
            request.prefilling = remainder
        else:
            request.pending = remainder

    def _prefill_chunk(self) -> None:
        """Prefill the next chunk of the first request that is prefilling (its first token is sampled after its
        last chunk): one chunk between two steps."""
        with self.condition:
            prefilling = [(slot, request) for slot, request in self.active.items()
                          if request.prefilling and not request.cancelled]
        if not prefilling:
            return
        slot, request = prefilling[0]
        chunk, request.prefilling = request.prefilling[:self.prefill_chunk], request.prefilling[self.prefill_chunk:]
        logits = self.model.prefill_slot(slot, chunk, request.position)
        self.slot_tokens[slot].extend(chunk)
        request.position += len(chunk)
        if not request.prefilling:
            self._sampled(slot, logits)

    def _step(self) -> None:
        with self.condition:
            for slot, request in list(self.active.items()):
                if request.cancelled:
                    request.events.put(FinishEvent(request.index, "cancelled"))
                    del self.active[slot]
            # a slot still prefilling rides along as a free row: its throw-away write lands where its next chunk goes
            running = {slot: request for slot, request in self.active.items() if request.pending}
        if not running:
            return
        rows = self.model.step_rows(max(running) + 1)
        tokens = [running[row].pending[0] if row in running else 0 for row in range(rows)]
        positions = [running[row].position if row in running else self._spare_position(row) for row in range(rows)]
        logits = self.model.decode_slots(tokens, positions)
        self.steps += 1
        self.largest_batch = max(self.largest_batch, len(running))
        for slot, request in running.items():
            self.slot_tokens[slot].append(request.pending.pop(0))
            request.position += 1
            if not request.pending:
                self._sampled(slot, logits[slot])

    def _spare_position(self, slot: int) -> int:
        """Where a free slot inside the batch's rows writes its throw-away token: just past the tokens it keeps for
        reuse (the last one is given up when the slot is full)."""
        kept = self.slot_tokens[slot]
        if len(kept) >= self.model.max_context:
            del kept[self.model.max_context - 1:]
        return len(kept)

    def _sampled(self, slot: int, logits: numpy.ndarray) -> None:
        """Sample the next token of the request in `slot`, report it, and end the request or queue the token."""
        request = self.active[slot]
        assert request.generator is not None
        token = sample(logits, request.temperature, request.top_k, request.top_p, request.generator)
        event = TokenEvent(request.index, token)
        if request.logprobs is not None:
            shifted = logits.astype(numpy.float64) - logits.max()
            log_probabilities = shifted - numpy.log(numpy.exp(shifted).sum())
            event.logprob = float(log_probabilities[token])
            best = numpy.argsort(-log_probabilities, kind="stable")[:request.logprobs]
            event.top = [(int(index), float(log_probabilities[index])) for index in best]
        request.events.put(event)
        request.generated += 1
        reason = "stop" if token in request.stop_ids else "length" if request.generated >= request.max_tokens or \
            request.position >= self.model.max_context else None
        if reason is None:
            request.pending = [token]
            return
        request.events.put(FinishEvent(request.index, reason))
        with self.condition:
            del self.active[slot]


def _shared_prefix(cached: list[int], prompt: list[int]) -> int:
    """How many leading tokens of `prompt` are cached, leaving at least its last one to run (its logits are needed)."""
    shared, limit = 0, min(len(cached), len(prompt) - 1)
    while shared < limit and cached[shared] == prompt[shared]:
        shared += 1
    return shared
