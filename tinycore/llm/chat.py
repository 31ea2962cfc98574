"""Chat prompts: the llama3 and chatml (qwen) formats, recognised from the GGUF's `tokenizer.chat_template`, and a
Session that turns text in into streamed text out with a model and its tokenizer.

The Jinja template itself is not executed (that would need a template engine): the two formats it describes are
written out here, and a template of another family is refused with its name.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tinycore.llm.config import UnsupportedModelError
from tinycore.llm.model import Transformer
from tinycore.llm.tokenizer import Tokenizer

Message = dict[str, str]
"""{"role": "system" | "user" | "assistant", "content": text}."""


def chat_format(template: str | None, tokenizer: Tokenizer) -> str:
    """'llama3' or 'chatml', from the chat template's text (or, without one, from the special tokens present)."""
    markers = template if template is not None else " ".join(tokenizer.special_ids)
    if "<|start_header_id|>" in markers:
        return "llama3"
    if "<|im_start|>" in markers:
        return "chatml"
    described = "no tokenizer.chat_template" if template is None else f"a chat template starting {template[:60]!r}"
    raise UnsupportedModelError(f"the model has {described}; chat supports the llama3 and chatml formats "
                                "(use --prompt with --raw for plain completion)")


def render_chat(messages: Sequence[Message], format_name: str) -> str:
    """The prompt text for `messages` in `format_name`, ending where the assistant's reply begins."""
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or \
                not isinstance(message.get("content"), str):
            raise ValueError("each message needs a string 'role' and a string 'content'")
    if format_name == "llama3":
        text = "<|begin_of_text|>" + "".join(f"<|start_header_id|>{message['role']}<|end_header_id|>\n\n"
                                             f"{message['content']}<|eot_id|>" for message in messages)
        return text + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    if format_name == "chatml":
        text = "".join(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n" for message in messages)
        return text + "<|im_start|>assistant\n"
    raise UnsupportedModelError(f"chat format {format_name!r} is not supported; supported: llama3, chatml")


@dataclass
class Completion:
    """What one generation produced, filled in while its text streams."""

    prompt_tokens: int
    completion_tokens: int = 0
    finish_reason: str = "length"
    first_token_seconds: float = 0.0
    seconds: float = 0.0
    text: list[str] = field(default_factory=list)


class Session:
    """A model with its tokenizer: `complete(prompt_ids, ...)` streams text and fills in a Completion."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, template: str | None = None):
        self.model, self.tokenizer, self.template = model, tokenizer, template

    @property
    def chat_format(self) -> str:
        """This model's chat format (raises UnsupportedModelError when it has none this package writes)."""
        return chat_format(self.template, self.tokenizer)

    def chat_ids(self, messages: Sequence[Message]) -> list[int]:
        """The token ids of the chat prompt for `messages`."""
        return self.tokenizer.encode(render_chat(messages, self.chat_format), add_bos=False)

    def complete(self, prompt_ids: list[int], completion: Completion, max_tokens: int, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                 stop: Sequence[str] = ()) -> Iterator[str]:
        """Stream the text generated after `prompt_ids`, ending at a stop token, a stop string (not included) or
        `max_tokens`; `completion` gets the counts, timing and finish reason."""
        if len(prompt_ids) + max_tokens > self.model.max_context:
            raise ContextOverflowError(f"the prompt ({len(prompt_ids)} tokens) plus max_tokens ({max_tokens}) "
                                       f"exceeds the context of {self.model.max_context} tokens")
        decoder = self.tokenizer.stream()
        held = ""  # text that could still be the start of a stop string
        longest_stop = max((len(text) for text in stop), default=0)
        start = time.perf_counter()
        for token in self.model.generate(prompt_ids, max_tokens, temperature, top_k, top_p, seed,
                                         stop=tuple(self.tokenizer.stop_ids)):
            if completion.completion_tokens == 0:
                completion.first_token_seconds = time.perf_counter() - start
            completion.completion_tokens += 1
            if token in self.tokenizer.stop_ids:
                completion.finish_reason = "stop"
                break
            held += decoder.add(token)
            found = [held.index(text) for text in stop if text and text in held]
            if found:
                completion.finish_reason = "stop"
                held = held[:min(found)]
                break
            ready = len(held) - (longest_stop - 1) if longest_stop else len(held)
            if ready > 0:
                completion.text.append(held[:ready])
                yield held[:ready]
                held = held[ready:]
        else:
            held += decoder.flush()
        if held:
            completion.text.append(held)
            yield held
        completion.seconds = time.perf_counter() - start


class ContextOverflowError(ValueError):
    """A request whose prompt and requested tokens do not fit the model's context."""
