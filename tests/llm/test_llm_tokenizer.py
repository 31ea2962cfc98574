"""Tokenizer.from_gguf on small vocabularies written with gguf.GGUFWriter, against ids and text worked out by hand:
SentencePiece-style merges by score with byte fallback, byte-level BPE with the llama3 and qwen2 pre-tokenizers,
special tokens, and a streaming decoder that never splits a UTF-8 character."""
from __future__ import annotations

import os

import pytest

from tinycore.llm.tokenizer import BYTE, CONTROL, NORMAL, Tokenizer, TokenizerError, _byte_characters

SPM_PIECES = [("▁", -10.0), ("h", -10.0), ("e", -10.0), ("l", -10.0), ("o", -10.0), ("w", -10.0), ("r", -10.0),
              ("d", -10.0), ("ll", -1.0), ("▁h", -2.0), ("▁w", -2.5), ("▁he", -3.0), ("or", -3.5), ("llo", -4.0),
              ("▁hello", -5.0), ("▁wor", -6.0), ("ld", -7.0)]


def _write(path: str, model: str, tokens: list[str], types: list[int], scores: list[float] | None = None,
           merges: list[str] | None = None, pre: str | None = None) -> str:
    import gguf
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if scores is not None:
        writer.add_token_scores(scores)
    if merges is not None:
        writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def spm(tmp_path: os.PathLike[str]) -> Tokenizer:
    tokens = ["<unk>", "<s>", "</s>", "<|eot|>"] + [f"<0x{byte:02X}>" for byte in range(256)]
    types = [2, CONTROL, CONTROL, CONTROL] + [BYTE] * 256
    scores = [0.0] * len(tokens)
    for piece, score in SPM_PIECES:
        tokens.append(piece)
        types.append(NORMAL)
        scores.append(score)
    path = _write(os.path.join(os.fspath(tmp_path), "spm.gguf"), "llama", tokens, types, scores)
    return Tokenizer.from_gguf(path)


def test_sentencepiece_merges_by_score(spm: Tokenizer) -> None:
    """'hello world' -> '▁hello', '▁wor', 'ld' (worked by hand: ll, ▁h, ▁w, ▁he, or, llo, ▁hello, ▁wor, ld in score
    order; '▁world' is not in the vocabulary), after BOS by default."""
    ids = spm.encode("hello world")
    assert [spm.tokens[token] for token in ids] == ["<s>", "▁hello", "▁wor", "ld"]
    assert spm.decode(ids) == "hello world"
    assert spm.encode("hello world", add_bos=False) == ids[1:]


def test_sentencepiece_byte_fallback_and_streaming(spm: Tokenizer) -> None:
    """'hé': é is not a piece, so its UTF-8 bytes C3 A9 become byte tokens; the stream holds C3 until A9 arrives."""
    ids = spm.encode("hé", add_bos=False)
    assert [spm.tokens[token] for token in ids] == ["▁h", "<0xC3>", "<0xA9>"]
    stream = spm.stream()
    assert [stream.add(token) for token in ids] == ["h", "", "é"]
    assert stream.flush() == ""


def test_sentencepiece_special_tokens(spm: Tokenizer) -> None:
    """A special token's text is that token; the text after it gets the space prefix again (as llama.cpp does)."""
    ids = spm.encode("hello<|eot|>hello", add_bos=False)
    assert [spm.tokens[token] for token in ids] == ["▁hello", "<|eot|>", "▁hello"]
    # decoding keeps the space of the second '▁hello' (only the text's first space prefix is removed)
    assert spm.decode(ids) == "hello<|eot|> hello"
    assert spm.encode("<|eot|>", add_bos=False, parse_special=False) != [3]
    assert 2 in spm.stop_ids and spm.bos_id == 1


def _bpe(tmp_path: os.PathLike[str], pre: str) -> Tokenizer:
    alphabet = _byte_characters()
    space = alphabet[ord(" ")]
    merges = ["h e", "l l", "he ll", "hell o", f"{space} w", "o r", f"{space}w or", "l d", "1 2", "12 3", "' t",
              "d o", "do n"]
    tokens = [alphabet[byte] for byte in range(256)]
    tokens += ["he", "ll", "hell", "hello", f"{space}w", "or", f"{space}wor", "ld", "12", "123", "'t", "do", "don",
               "<|begin_of_text|>", "<|eot_id|>"]
    types = [NORMAL] * (len(tokens) - 2) + [CONTROL, CONTROL]
    return Tokenizer.from_gguf(_write(os.path.join(os.fspath(tmp_path), f"{pre}.gguf"), "gpt2", tokens, types,
                                      merges=merges, pre=pre))


def test_bpe_llama3_merges_and_pretokenizer(tmp_path: os.PathLike[str]) -> None:
    """llama3 ('llama-bpe'): 'hello world' -> 'hello', 'Ġwor', 'ld'; digits go in groups of up to three ('12345' ->
    '123' + '4', '5'); "don't" -> 'don', "'t"; special tokens are matched first."""
    tokenizer = _bpe(tmp_path, "llama-bpe")
    space = _byte_characters()[ord(" ")]

    def pieces(text: str) -> list[str]:
        return [tokenizer.tokens[token] for token in tokenizer.encode(text, add_bos=False)]
    assert pieces("hello world") == ["hello", f"{space}wor", "ld"]
    assert pieces("12345") == ["123", "4", "5"]
    assert pieces("don't") == ["don", "'t"]
    assert pieces("hello<|eot_id|>") == ["hello", "<|eot_id|>"]
    assert tokenizer.decode(tokenizer.encode("hello world<|eot_id|>", add_bos=False)) == "hello world<|eot_id|>"


def test_bpe_qwen2_splits_single_digits(tmp_path: os.PathLike[str]) -> None:
    """qwen2's pre-tokenizer takes digits one at a time, so '12345' never merges."""
    tokenizer = _bpe(tmp_path, "qwen2")
    assert [tokenizer.tokens[token] for token in tokenizer.encode("12345", add_bos=False)] == list("12345")


def test_bpe_stream_never_splits_a_character(tmp_path: os.PathLike[str]) -> None:
    """'é€' is five bytes, each its own token: the stream gives text only when a character is complete."""
    tokenizer = _bpe(tmp_path, "llama-bpe")
    ids = tokenizer.encode("é€", add_bos=False)
    assert len(ids) == 5
    stream = tokenizer.stream()
    assert [stream.add(token) for token in ids] == ["", "é", "", "", "€"]
    partial = tokenizer.stream()
    assert partial.add(ids[2]) == "" and partial.flush() == "\ufffd"


def test_tokenizer_errors(tmp_path: os.PathLike[str]) -> None:
    """An unknown pre-tokenizer, tokenizer model or token id is named in the error."""
    with pytest.raises(NotImplementedError, match="'mystery'"):
        _bpe(tmp_path, "mystery")
    with pytest.raises(NotImplementedError, match="'rwkv'"):
        Tokenizer("rwkv", ["a"])
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        Tokenizer("gpt2", ["a"], merges=[]).decode([5])
