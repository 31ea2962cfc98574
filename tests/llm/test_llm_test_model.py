"""The random test model's GGUF writer against the gguf package's GGUFWriter (byte for byte), and `tiny llm
--make-test-model`: a model that loads, encodes any text to its UTF-8 bytes, and answers with the numpy reference's
greedy text."""
from __future__ import annotations

import os

import numpy
import pytest
from llm_fixtures import byte_text, greedy_reference

from tinycore.cli import main
from tinycore.llm.test_model import GGUFFileWriter, random_blocks

gguf = pytest.importorskip("gguf", reason="the writer is compared with the gguf package's: pip install gguf")


def test_writer_matches_gguf_package(tmp_path: os.PathLike[str]) -> None:
    """Every value kind the test model uses (u32, f32, bool, string, i32 and string arrays) and tensors in F32, F16,
    Q8_0 and Q4_K blocks and BF16 bits come out as the same bytes as gguf.GGUFWriter writes."""
    generator = numpy.random.default_rng(7)
    floats = generator.standard_normal((3, 5)).astype(numpy.float32)
    halves = generator.standard_normal((4, 2)).astype(numpy.float16)
    q8 = random_blocks("Q8_0", 6, seed=1).reshape(3, 2 * 34)
    q4k = random_blocks("Q4_K", 2, seed=2).reshape(2, 144)
    bf16 = generator.integers(0, 256, size=(2, 6), dtype=numpy.uint8)
    ours_path, theirs_path = (os.path.join(os.fspath(tmp_path), name) for name in ("ours.gguf", "theirs.gguf"))
    ours = GGUFFileWriter("llama")
    ours.add("llama.block_count", 3)
    ours.add("llama.rope.freq_base", 500000.0)
    ours.add("llama.expert_weights_norm", True)
    ours.add("tokenizer.ggml.model", "gpt2")
    ours.add("tokenizer.ggml.token_type", [1, 3, -2])
    ours.add("tokenizer.ggml.tokens", ["a", "é", "<|x|>"])
    for name, data, kind in (("f", floats, None), ("h", halves, None), ("q", q8, "Q8_0"), ("k", q4k, "Q4_K"),
                             ("b", bf16, "BF16")):
        ours.add_tensor(name, data, kind)
    ours.write(ours_path)
    theirs = gguf.GGUFWriter(theirs_path, "llama")
    theirs.add_block_count(3)
    theirs.add_rope_freq_base(500000.0)
    theirs.add_expert_weights_norm(True)
    theirs.add_tokenizer_model("gpt2")
    theirs.add_token_types([1, 3, -2])
    theirs.add_token_list(["a", "é", "<|x|>"])
    theirs.add_tensor("f", floats)
    theirs.add_tensor("h", halves)
    theirs.add_tensor("q", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    theirs.add_tensor("k", q4k, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    theirs.add_tensor("b", bf16, raw_dtype=gguf.GGMLQuantizationType.BF16)
    theirs.write_header_to_file()
    theirs.write_kv_data_to_file()
    theirs.write_tensors_to_file()
    theirs.close()
    with open(ours_path, "rb") as mine, open(theirs_path, "rb") as reference:
        assert mine.read() == reference.read()


def test_writer_refuses_partial_blocks() -> None:
    """A row of raw bytes that is not whole blocks of its type is refused, naming the tensor."""
    with pytest.raises(ValueError, match="w: a row of 33 bytes is not whole Q8_0 blocks"):
        GGUFFileWriter("llama").add_tensor("w", numpy.zeros((2, 33), numpy.uint8), "Q8_0")


def test_make_test_model_takes_any_text(tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`tiny llm --make-test-model PATH` writes a model whose tokenizer turns 'héllo' into its 6 UTF-8 bytes, and
    `--prompt` on it prints the reference's greedy continuation of those bytes."""
    from tinycore.llm.tokenizer import Tokenizer
    path = os.path.join(os.fspath(tmp_path), "try.gguf")
    assert main(["llm", "--make-test-model", path]) == 0
    assert f"--model {path}" in capsys.readouterr().out
    assert Tokenizer.from_gguf(path).encode("héllo") == [0x68, 0xC3, 0xA9, 0x6C, 0x6C, 0x6F]
    assert main(["llm", "--model", path, "--prompt", "héllo", "--raw", "--max-tokens", "5"]) == 0
    expected = greedy_reference(path, [0x68, 0xC3, 0xA9, 0x6C, 0x6C, 0x6F], 5, stop=(257,))
    assert capsys.readouterr().out == byte_text(expected) + "\n"


def test_make_test_model_errors_exit_2(tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An unwritable path, and neither --model nor --make-test-model, exit 2 with a message saying what to pass."""
    assert main(["llm", "--make-test-model", os.path.join(os.fspath(tmp_path), "none", "x.gguf")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main(["llm", "--prompt", "x"]) == 2
    assert "--make-test-model PATH" in capsys.readouterr().err
