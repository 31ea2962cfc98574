"""Chat prompts: the llama3 and chatml (qwen) formats, recognised from the GGUF's `tokenizer.chat_template`, and a
Session that turns text in into streamed text out with a model and its tokenizer.

The Jinja template itself is not executed (that would need a template engine): the two formats it describes are
written out here, and a template of another family is refused with its name.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tinycore.llm.config import UnsupportedModelError
from tinycore.llm.model import Transformer
from tinycore.llm.tokenizer import StreamDecoder, Tokenizer

Message = Mapping[str, object]
"""{"role": "system" | "developer" | "user" | "assistant", "content": text or a list of text parts}."""

ROLES = ("system", "developer", "user", "assistant")
"""The roles a message may have ('developer', OpenAI's newer name for system instructions, is written as system)."""


def message_text(content: object) -> str:
    """A message's content as text: a string as it is, or a list of OpenAI text parts ({"type": "text", "text":
    ...}) joined by newlines. Other parts (images, audio) raise ValueError."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"a content part must be {{'type': 'text', 'text': string}}; got a part of type "
                                 f"{kind!r} (only text parts are supported)")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ValueError(f"a message's 'content' must be a string or a list of text parts, got {type(content).__name__}")


def normalized_messages(messages: Sequence[object]) -> list[dict[str, str]]:
    """Each message as {"role", "content"} strings: the role checked against ROLES ('developer' written as
    'system'), the content as message_text. Raises ValueError naming the first bad message."""
    result = []
    for number, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {number} needs a string 'role' and a 'content'")
        role = message["role"]
        if role not in ROLES:
            raise ValueError(f"message {number} has role {role!r}; roles: {', '.join(ROLES)}")
        if "content" not in message:
            raise ValueError(f"message {number} has no 'content'")
        text = message_text(message["content"])
        result.append({"role": "system" if role == "developer" else role, "content": text})
    return result


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
    """The prompt text for `messages` in `format_name`, ending where the assistant's reply begins (each message
    checked and normalized by normalized_messages)."""
    messages = normalized_messages(messages)
    if format_name == "llama3":
        text = "<|begin_of_text|>" + "".join(f"<|start_header_id|>{message['role']}<|end_header_id|>\n\n"
                                             f"{message['content']}<|eot_id|>" for message in messages)
        return text + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    if format_name == "chatml":
        text = "".join(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n" for message in messages)
        return text + "<|im_start|>assistant\n"
    raise UnsupportedModelError(f"chat format {format_name!r} is not supported; supported: llama3, chatml")


class TextAssembler:
    """Turns one sequence's tokens into text as they come: stop tokens end it without text, and text is held back
    while it could still be the start of a stop string, which ends it (the stop string not included)."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.stop = [text for text in stop if text]
        self.longest_stop = max((len(text) for text in self.stop), default=0)
        self.decoder: StreamDecoder = tokenizer.stream()
        self.held = ""
        self.stopped = False

    def add(self, token: int) -> str:
        """The text that may be shown after `token` (possibly empty); `stopped` turns true at a stop token or
        string, and then the text before the stop string is returned."""
        if token in self.tokenizer.stop_ids:
            self.stopped = True
            return self.finish()
        self.held += self.decoder.add(token)
        found = [self.held.index(text) for text in self.stop if text in self.held]
        if found:
            self.stopped = True
            ready, self.held = self.held[:min(found)], ""
            return ready
        count = len(self.held) - (self.longest_stop - 1) if self.longest_stop else len(self.held)
        if count <= 0:
            return ""
        ready, self.held = self.held[:count], self.held[count:]
        return ready

    def finish(self) -> str:
        """The text still held when the sequence ends without a stop string (with an incomplete character's bytes
        as U+FFFD unless a stop token ended it)."""
        if not self.stopped:
            self.held += self.decoder.flush()
        ready, self.held = self.held, ""
        return ready


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
        assembler = TextAssembler(self.tokenizer, stop)
        start = time.perf_counter()
        for token in self.model.generate(prompt_ids, max_tokens, temperature, top_k, top_p, seed,
                                         stop=tuple(self.tokenizer.stop_ids)):
            if completion.completion_tokens == 0:
                completion.first_token_seconds = time.perf_counter() - start
            completion.completion_tokens += 1
            piece = assembler.add(token)
            if piece:
                completion.text.append(piece)
                yield piece
            if assembler.stopped:
                completion.finish_reason = "stop"
                break
        rest = assembler.finish()
        if rest:
            completion.text.append(rest)
            yield rest
        completion.seconds = time.perf_counter() - start


class ContextOverflowError(ValueError):
    """A request whose prompt and requested tokens do not fit the model's context."""
