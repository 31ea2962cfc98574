"""Tokenizers read from GGUF metadata: SentencePiece-style ("llama": scored merges with byte fallback) and byte-level
BPE ("gpt2": ranked merges over bytes mapped to printable characters, after a pre-tokenizer regex chosen by
`tokenizer.ggml.pre`).

Special tokens (control and user-defined tokens, such as `<|eot_id|>`) are matched in the text before the rest is
tokenized, and decode to their text. Decoding streams through `StreamDecoder`, which holds back the bytes of a
character that is not complete yet.
"""
from __future__ import annotations

import codecs
import heapq
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
"""The token types of `tokenizer.ggml.token_type`."""

SPACE = "\u2581"
"""The character SentencePiece writes for a space."""

# The pre-tokenizer expressions of the byte-level BPE families (the well-known published patterns), written for the
# `regex` module's Unicode classes.
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_REST = r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
PRE_TOKENIZERS: dict[str, str] = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|" + _REST,
    "qwen2": _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|" + _REST,
}
"""Pre-tokenizer family -> the expression that splits text into words before the merges."""

PRE_TOKENIZER_NAMES: dict[str, str] = {"default": "gpt2", "gpt2": "gpt2", "llama-bpe": "llama3", "llama3": "llama3",
                                       "smaug-bpe": "llama3", "qwen2": "qwen2", "deepseek-r1-qwen": "qwen2"}
"""`tokenizer.ggml.pre` values -> the pre-tokenizer family they use."""


def _byte_characters() -> dict[int, str]:
    """The byte-level BPE alphabet: printable Latin-1 bytes stand for themselves, the others (controls, space, ...)
    for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(0x100 + extra)
            extra += 1
    return mapping


class TokenizerError(ValueError):
    """A tokenizer the metadata does not describe completely, or input it cannot encode."""


class StreamDecoder:
    """Decodes token ids one at a time into text, never splitting a UTF-8 character: the bytes of an incomplete
    character are held until the rest arrives (`flush` returns what is left, malformed bytes as U+FFFD)."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.first = True

    def add(self, token: int) -> str:
        """The text that `token` completes (possibly empty)."""
        data = self.tokenizer.token_bytes(token)
        if self.first and data:
            self.first = False
            data = self.tokenizer._strip_prefix(data)
        return str(self.decoder.decode(data))

    def flush(self) -> str:
        """Whatever bytes remain, decoded with replacement characters for an incomplete character."""
        return str(self.decoder.decode(b"", final=True))


class Tokenizer:
    """A GGUF model's tokenizer: `encode(text)` -> ids, `decode(ids)` -> text, `stream()` for incremental decoding.

    Build it with `Tokenizer.from_gguf(path)` or `Tokenizer.from_metadata(metadata)`.
    """

    def __init__(self, model: str, tokens: Sequence[str], token_types: Sequence[int] | None = None,
                 scores: Sequence[float] | None = None, merges: Sequence[str] | None = None, pre: str = "default",
                 bos_id: int | None = None, eos_id: int | None = None, eot_id: int | None = None,
                 unknown_id: int | None = None, add_bos: bool = False, add_space_prefix: bool = True):
        if model not in ("llama", "gpt2"):
            raise NotImplementedError(f"tokenizer model {model!r} is not supported; supported: 'llama' "
                                      "(SentencePiece) and 'gpt2' (byte-level BPE)")
        self.model = model
        self.tokens = list(tokens)
        self.token_types = list(token_types) if token_types is not None else [NORMAL] * len(self.tokens)
        if len(self.token_types) != len(self.tokens):
            raise TokenizerError(f"tokenizer.ggml.token_type has {len(self.token_types)} entries for "
                                 f"{len(self.tokens)} tokens")
        self.ids = {token: index for index, token in enumerate(self.tokens)}
        self.bos_id, self.eos_id, self.unknown_id, self.add_bos = bos_id, eos_id, unknown_id, add_bos
        self.eot_id = eot_id
        self.add_space_prefix = add_space_prefix
        specials = [index for index, kind in enumerate(self.token_types) if kind in (CONTROL, USER_DEFINED)
                    and self.tokens[index]]
        self.special_ids = {self.tokens[index]: index for index in specials}
        self._special_pattern = re.compile("|".join(re.escape(text) for text in
                                                    sorted(self.special_ids, key=len, reverse=True))) \
            if self.special_ids else None
        self.stop_ids = {index for index in (eos_id, eot_id) if index is not None}
        for text in ("<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>"):
            if text in self.special_ids:
                self.stop_ids.add(self.special_ids[text])
        if model == "llama":
            if scores is None or len(scores) != len(self.tokens):
                raise TokenizerError("a SentencePiece ('llama') tokenizer needs tokenizer.ggml.scores, one per token")
            self.scores = list(scores)
            self._byte_ids = {}
            for index, token in enumerate(self.tokens):
                if self.token_types[index] == BYTE and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", token):
                    self._byte_ids[int(token[3:5], 16)] = index
        else:
            if merges is None:
                raise TokenizerError("a byte-level BPE ('gpt2') tokenizer needs tokenizer.ggml.merges")
            if pre not in PRE_TOKENIZER_NAMES:
                raise NotImplementedError(f"pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported; supported: "
                                          f"{', '.join(sorted(PRE_TOKENIZER_NAMES))}")
            try:
                import regex
            except ImportError:
                raise ImportError("byte-level BPE tokenizers need the `regex` module for Unicode classes: "
                                  "pip install regex") from None
            self.pre = PRE_TOKENIZER_NAMES[pre]
            self._pre_pattern = regex.compile(PRE_TOKENIZERS[self.pre])
            self.ranks = {}
            for rank, merge in enumerate(merges):
                left, separator, right = merge.partition(" ")
                if not separator:
                    raise TokenizerError(f"merge {rank} ({merge!r}) is not two tokens separated by a space")
                self.ranks[(left, right)] = rank
            self._to_character = _byte_characters()
            self._to_byte = {character: byte for byte, character in self._to_character.items()}
        self._cache: dict[str, list[int]] = {}

    # ---- construction ----

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> Tokenizer:
        """The tokenizer described by GGUF metadata (the `tokenizer.ggml.*` keys)."""
        if "tokenizer.ggml.model" not in metadata or "tokenizer.ggml.tokens" not in metadata:
            raise TokenizerError("the GGUF metadata has no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens)")

        def optional_id(key: str) -> int | None:
            value = metadata.get(f"tokenizer.ggml.{key}")
            return int(value) if isinstance(value, int) and value >= 0 else None
        model = str(metadata["tokenizer.ggml.model"])
        return cls(model, metadata["tokenizer.ggml.tokens"], metadata.get("tokenizer.ggml.token_type"),
                   metadata.get("tokenizer.ggml.scores"),
                   metadata.get("tokenizer.ggml.merges", [] if model == "gpt2" else None),  # none: bytes only
                   str(metadata.get("tokenizer.ggml.pre", "default")), optional_id("bos_token_id"),
                   optional_id("eos_token_id"), optional_id("eot_token_id"), optional_id("unknown_token_id"),
                   bool(metadata.get("tokenizer.ggml.add_bos_token", model == "llama")),
                   bool(metadata.get("tokenizer.ggml.add_space_prefix", True)))

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """The tokenizer stored in the metadata of the GGUF file at `path`."""
        from tinycore.nn.gguf import gguf_load_blocks
        metadata, _ = gguf_load_blocks(os.fspath(path), device="CPU")
        return cls.from_metadata(metadata)

    @property
    def vocab_size(self) -> int:
        """The number of tokens."""
        return len(self.tokens)

    # ---- encoding ----

    def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True) -> list[int]:
        """The token ids of `text`; `add_bos` (default: the metadata's add_bos_token) puts the BOS token first;
        `parse_special` matches special tokens' text (`<|eot_id|>`) as those tokens."""
        if not isinstance(text, str):
            raise TypeError(f"encode needs a str, got {type(text).__name__}")
        ids: list[int] = []
        if (self.add_bos if add_bos is None else add_bos):
            if self.bos_id is None:
                raise TokenizerError("add_bos was asked for but the metadata has no tokenizer.ggml.bos_token_id")
            ids.append(self.bos_id)
        previous_special = True
        for fragment, special in self._split_special(text, parse_special):
            if special is not None:
                ids.append(special)
                previous_special = True
                continue
            if self.model == "llama":
                prefix = " " if self.add_space_prefix and previous_special else ""
                ids.extend(self._encode_sentencepiece((prefix + fragment).replace(" ", SPACE)))
            else:
                for word in self._pre_pattern.findall(fragment):
                    ids.extend(self._encode_word(word))
            previous_special = False
        return ids

    def _split_special(self, text: str, parse_special: bool) -> Iterable[tuple[str, int | None]]:
        if not parse_special or self._special_pattern is None:
            if text:
                yield text, None
            return
        position = 0
        for match in self._special_pattern.finditer(text):
            if match.start() > position:
                yield text[position:match.start()], None
            yield match.group(), self.special_ids[match.group()]
            position = match.end()
        if position < len(text):
            yield text[position:], None

    def _encode_sentencepiece(self, text: str) -> list[int]:
        """Merge adjacent pieces, the pair whose joined piece scores highest first (leftmost on ties), then map
        pieces outside the vocabulary to byte tokens."""
        pieces: list[str | None] = list(text)
        following = list(range(1, len(pieces) + 1))
        preceding = list(range(-1, len(pieces) - 1))
        queue: list[tuple[float, int, int, str]] = []

        def offer(left: int) -> None:
            right = following[left]
            if right >= len(pieces):
                return
            joined = str(pieces[left]) + str(pieces[right])
            index = self.ids.get(joined)
            if index is not None and self.token_types[index] in (NORMAL, USER_DEFINED, UNUSED):
                heapq.heappush(queue, (-self.scores[index], left, right, joined))
        for position in range(len(pieces) - 1):
            offer(position)
        while queue:
            _score, left, right, joined = heapq.heappop(queue)
            if pieces[left] is None or pieces[right] is None or following[left] != right or \
                    str(pieces[left]) + str(pieces[right]) != joined:
                continue  # a stale pair: one side was merged since it was offered
            pieces[left], pieces[right] = joined, None
            following[left] = following[right]
            if following[left] < len(pieces):
                preceding[following[left]] = left
            if preceding[left] >= 0:
                offer(preceding[left])
            offer(left)
        ids: list[int] = []
        for piece in pieces:
            if piece is None:
                continue
            if piece in self.ids:
                ids.append(self.ids[piece])
                continue
            for byte in piece.encode("utf-8"):
                if byte in self._byte_ids:
                    ids.append(self._byte_ids[byte])
                elif self.unknown_id is not None:
                    ids.append(self.unknown_id)
                    break
                else:
                    raise TokenizerError(f"{piece!r} is not in the vocabulary, which has no byte tokens and no "
                                         "unknown token")
        return ids

    def _encode_word(self, word: str) -> list[int]:
        """Byte-level BPE of one pre-tokenized word: its bytes as alphabet characters, lowest-ranked merges first."""
        if word in self._cache:
            return self._cache[word]
        symbols = [self._to_character[byte] for byte in word.encode("utf-8")]
        while len(symbols) > 1:
            best = min(range(len(symbols) - 1), key=lambda position: self.ranks.get(
                (symbols[position], symbols[position + 1]), len(self.ranks)))
            if (symbols[best], symbols[best + 1]) not in self.ranks:
                break
            pair = (symbols[best], symbols[best + 1])
            merged: list[str] = []
            position = 0
            while position < len(symbols):  # merge every occurrence of the pair, left to right
                if position < len(symbols) - 1 and (symbols[position], symbols[position + 1]) == pair:
                    merged.append(pair[0] + pair[1])
                    position += 2
                else:
                    merged.append(symbols[position])
                    position += 1
            symbols = merged
        ids = []
        for symbol in symbols:
            if symbol in self.ids:
                ids.append(self.ids[symbol])
            elif self.unknown_id is not None:
                ids.append(self.unknown_id)
            else:
                raise TokenizerError(f"byte-level piece {symbol!r} is not in the vocabulary")
        if len(self._cache) < 65536:
            self._cache[word] = ids
        return ids

    # ---- decoding ----

    def token_bytes(self, token: int) -> bytes:
        """The bytes token `token` stands for (special tokens: their text)."""
        if not isinstance(token, int) or not 0 <= token < len(self.tokens):
            raise TokenizerError(f"token id {token!r} is outside the vocabulary [0, {len(self.tokens)})")
        text, kind = self.tokens[token], self.token_types[token]
        if kind == CONTROL:
            return text.encode("utf-8") if token not in (self.bos_id,) else b""
        if kind == USER_DEFINED:
            return text.encode("utf-8")
        if self.model == "llama":
            if kind == BYTE and token in self._byte_ids.values():
                return bytes([int(text[3:5], 16)])
            return text.replace(SPACE, " ").encode("utf-8")
        return bytes(self._to_byte[character] for character in text if character in self._to_byte)

    def _strip_prefix(self, data: bytes) -> bytes:
        """The first decoded bytes without the space SentencePiece put in front of the text."""
        if self.model == "llama" and self.add_space_prefix and data.startswith(b" "):
            return data[1:]
        return data

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids` (bytes that do not form valid UTF-8 become U+FFFD)."""
        decoder = self.stream()
        return "".join(decoder.add(int(token)) for token in ids) + decoder.flush()

    def stream(self) -> StreamDecoder:
        """A decoder that takes ids one at a time and returns only complete characters."""
        return StreamDecoder(self)
