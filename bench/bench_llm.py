"""Language-model speed: a llama-architecture model with random weights, written by this script as Q8_0 and Q4_0 GGUF
files, run by tinycore.llm (and by llama.cpp through llama-cpp-python when it is installed): prefill and decode
tokens/s, time to first token and peak resident memory (also less the process's memory before the model loads,
as a ratio to the file's size), each runner in a fresh process.

    python bench/bench_llm.py                      # the ~1B model (dim 2048, 16 layers, vocab 32000)
    python bench/bench_llm.py --size small         # ~40M parameters, for a loaded or small machine
    python bench/bench_llm.py --size small --decode 32 --prompt 64 --types Q8_0
    python bench/bench_llm.py --llama-python /path/to/venv/bin/python   # llama.cpp from another environment

Files are cached in --directory (default: the system temp directory); they are rewritten only when missing.

Fairness: the runners never overlap. Each runs in a child process that has exited (its worker threads, llama.cpp's
spinning OpenMP/ggml pool included, are gone) before the next starts, and the parent sleeps --settle seconds
between children, so neither is timed while the other's threads still spin. With --rounds N the pairs run N times,
the order of the two runners alternating per round, and the table gives every round with the load average (1 min)
seen just before each child started; the ratios are per round (each against the peer of the same round).
Besides decode tokens/s (all decoded tokens over their total time), "median" is 1 / the median time of one decode
step, measured the same way for both runners: on a machine shared with other jobs it moves less with a single
step that lost its core than the mean does.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SIZES = {
    # name: dim, layers, heads, kv heads, hidden, vocab
    "1b": (2048, 16, 32, 8, 8192, 32000),
    "small": (512, 8, 8, 4, 1536, 8192),
    "tiny": (256, 2, 4, 2, 768, 2048),
}


def write_model(path: str, size: str, type_name: str) -> None:
    """A llama GGUF of `size` with every matrix as `type_name`: random quantized blocks whose float16 scales keep
    activations near unit scale; norms as F32; an untied output head."""
    import gguf
    import numpy
    dim, layers, heads, kv_heads, hidden, vocab = SIZES[size]
    kind = gguf.GGMLQuantizationType[type_name]
    block_elements, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    generator = numpy.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(dim)
    writer.add_feed_forward_length(hidden)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(500000.0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<0x{index:02X}>" if index < 256 else f"t{index}" for index in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([6] * 256 + [1] * (vocab - 256))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)

    def matrix(name: str, rows: int, columns: int) -> None:
        count = rows * columns // block_elements
        blocks = generator.integers(0, 256, size=(count, block_bytes), dtype=numpy.uint8)
        scale = numpy.float16(0.5 / numpy.sqrt(columns) / (8 if type_name == "Q4_0" else 64))
        if type_name in ("Q4_K", "Q5_K"):  # d * 6-bit scale * q - dmin * 6-bit minimum: finite, about zero mean
            scale = numpy.float16(0.5 / numpy.sqrt(columns) / (256 if type_name == "Q4_K" else 512))
            minimum = numpy.float16(float(scale) * (8 if type_name == "Q4_K" else 16))
            blocks[:, 2:4] = numpy.frombuffer(minimum.tobytes(), dtype=numpy.uint8)
        blocks[:, 0:2] = numpy.frombuffer(scale.tobytes(), dtype=numpy.uint8)
        writer.add_tensor(name, blocks.reshape(rows, columns // block_elements * block_bytes), raw_dtype=kind)
    matrix("token_embd.weight", vocab, dim)
    matrix("output.weight", vocab, dim)
    writer.add_tensor("output_norm.weight", numpy.ones(dim, dtype=numpy.float32))
    head_dim = dim // heads
    for layer in range(layers):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", numpy.ones(dim, dtype=numpy.float32))
        writer.add_tensor(prefix + "ffn_norm.weight", numpy.ones(dim, dtype=numpy.float32))
        matrix(prefix + "attn_q.weight", heads * head_dim, dim)
        matrix(prefix + "attn_k.weight", kv_heads * head_dim, dim)
        matrix(prefix + "attn_v.weight", kv_heads * head_dim, dim)
        matrix(prefix + "attn_output.weight", dim, heads * head_dim)
        matrix(prefix + "ffn_gate.weight", hidden, dim)
        matrix(prefix + "ffn_up.weight", hidden, dim)
        matrix(prefix + "ffn_down.weight", dim, hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM (ru_maxrss would carry over the parent's peak through fork and
    exec on Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2


def run_tinycore(path: str, prompt_length: int, decode: int, batch: int = 1) -> dict[str, float]:
    """Load, prefill `prompt_length` tokens, decode `decode` tokens (after one warm-up pass that compiles and
    captures the jitted step); with `batch` > 1 also the summed decode tokens/s of `batch` sequences generated
    together (the time of decode + 1 tokens less that of 1 token, which is the batch's prefill)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tinycore.llm.model import Transformer
    base = _peak_rss_mb()  # the interpreter, numpy and tinycore before any weight
    start = time.perf_counter()
    model = Transformer.from_gguf(path, max_context=prompt_length + decode + 8, max_batch=batch)
    load = time.perf_counter() - start
    prompt = [3 + (index * 7919) % (model.config.vocab_size - 3) for index in range(prompt_length)]
    result: dict[str, float] = {"load_s": load, "base_rss_mb": base}
    for attempt in ("warm-up", "measured"):
        model.cached_tokens = []
        start = time.perf_counter()
        first = end = start
        first_cpu = 0.0
        count = 0
        steps: list[float] = []
        for _ in model.generate(prompt, decode + 1 if attempt == "measured" else 3):
            now = time.perf_counter()
            if count == 0:
                first, first_cpu = now, time.process_time()
            else:
                steps.append(now - end)
            end = now
            count += 1
        if attempt == "measured":
            result.update(prefill_tps=prompt_length / (first - start), ttft_s=first - start,
                          decode_tps=(count - 1) / (end - first), decode_median_tps=1 / _median(steps),
                          decode_cpu_ms=(time.process_time() - first_cpu) / (count - 1) * 1e3)
    result["peak_rss_mb"] = _peak_rss_mb()
    if batch > 1:
        prompts = [prompt[row:] + prompt[:row] for row in range(batch)]
        model.generate_batch(prompts, 3)  # warm-up: compiles the batch's kernels and captures its step
        start = time.perf_counter()
        model.generate_batch(prompts, 1)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        model.generate_batch(prompts, decode + 1)
        result["batch_decode_tps"] = batch * decode / (time.perf_counter() - start - prefill)
    return result


def run_llama_cpp(path: str, prompt_length: int, decode: int, batch: int = 1) -> dict[str, float]:
    """The same measurement with llama.cpp (llama-cpp-python), 2 threads."""
    from llama_cpp import Llama
    base = _peak_rss_mb()
    start = time.perf_counter()
    # n_batch as large as the context: llama-cpp-python keeps n_batch rows of scores without logits_all, and reads
    # the last position's row, which a prompt of 512 tokens or more put past them (IndexError)
    context = prompt_length + decode + 8
    model = Llama(model_path=path, n_ctx=context, n_batch=context, n_threads=os.cpu_count() or 2, verbose=False)
    load = time.perf_counter() - start
    prompt = [3 + (index * 7919) % (model.n_vocab() - 3) for index in range(prompt_length)]
    model.reset()
    model.eval(prompt[:4])  # warm-up
    model.reset()
    start = time.perf_counter()
    model.eval(prompt)
    first, first_cpu = time.perf_counter(), time.process_time()
    token = int(model.scores[model.n_tokens - 1].argmax())
    steps: list[float] = []
    end = first
    for _ in range(decode):
        model.eval([token])
        token = int(model.scores[model.n_tokens - 1].argmax())
        now = time.perf_counter()
        steps.append(now - end)
        end = now
    return {"load_s": load, "prefill_tps": prompt_length / (first - start), "ttft_s": first - start,
            "decode_tps": decode / (end - first), "decode_median_tps": 1 / _median(steps),
            "decode_cpu_ms": (time.process_time() - first_cpu) / decode * 1e3, "peak_rss_mb": _peak_rss_mb(),
            "base_rss_mb": base}


RUNNERS = {"tinycore": run_tinycore, "llama.cpp": run_llama_cpp}


def _available(runner: str, python: str) -> bool:
    if runner == "llama.cpp":
        return subprocess.run([python, "-c", "import llama_cpp"], capture_output=True).returncode == 0
    return True


def main() -> None:
    """Write the models if needed, run each runner on each in a child process, print a table (and JSON)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    parser.add_argument("--types", default="Q8_0,Q4_0")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens to prefill")
    parser.add_argument("--decode", type=int, default=16, help="tokens to decode")
    parser.add_argument("--batch", type=int, default=1, help="also decode this many sequences together (tinycore)")
    parser.add_argument("--directory", default=tempfile.gettempdir())
    parser.add_argument("--rounds", type=int, default=1, help="repeat every runner and type, order alternating")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds to sleep before each child (after the previous one has exited)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--llama-python", default=sys.executable,
                        help="the Python that runs llama.cpp's child (one with llama-cpp-python installed)")
    parser.add_argument("--child", nargs=2, metavar=("RUNNER", "PATH"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        runner, path = arguments.child
        print(json.dumps(RUNNERS[runner](path, arguments.prompt, arguments.decode, arguments.batch)))
        return
    rows = []
    for round_index in range(arguments.rounds):
        for type_name in arguments.types.split(","):
            path = os.path.join(arguments.directory, f"bench_llm_{arguments.size}_{type_name}.gguf")
            if not os.path.exists(path):
                print(f"writing {path} ...", file=sys.stderr)
                write_model(path + ".partial", arguments.size, type_name)
                os.replace(path + ".partial", path)
            file_mb = os.path.getsize(path) / 2**20
            order = list(RUNNERS) if round_index % 2 == 0 else list(RUNNERS)[::-1]
            for runner in order:
                python = arguments.llama_python if runner == "llama.cpp" else sys.executable
                if not _available(runner, python):
                    if round_index == 0:
                        print(f"{runner}: not installed, skipped", file=sys.stderr)
                    continue
                command = [python, os.path.abspath(__file__), "--child", runner, path, "--prompt",
                           str(arguments.prompt), "--decode", str(arguments.decode), "--batch", str(arguments.batch)]
                time.sleep(arguments.settle)  # the previous child has exited; let the machine settle
                load = os.getloadavg()[0]
                finished = subprocess.run(command, capture_output=True, text=True)
                if finished.returncode != 0:
                    lines = [line.strip() for line in finished.stderr.splitlines() if line.strip()]
                    print(f"{runner} on {type_name} failed:\n" + "\n".join(lines[-20:]), file=sys.stderr)
                    continue
                figures = json.loads(finished.stdout.strip().splitlines()[-1])
                rows.append({"round": round_index + 1, "type": type_name, "runner": runner, "file_mb": file_mb,
                             "load": load, **figures})
    if arguments.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"model: llama {arguments.size} {SIZES[arguments.size]} (dim, layers, heads, kv heads, hidden, vocab); "
          f"prompt {arguments.prompt}, decode {arguments.decode}")
    print(f"{'round':>5} {'type':6} {'runner':10} {'load':>5} {'file MB':>8} {'load s':>7} {'prefill tok/s':>14} "
          f"{'TTFT s':>7} {'decode tok/s':>13} {'median':>7} {'decode CPU ms/tok':>18} {'peak RSS MB':>12} "
          f"{'(RSS-base)/file':>16}")
    for row in rows:
        print(f"{row['round']:5} {row['type']:6} {row['runner']:10} {row['load']:5.2f} {row['file_mb']:8.0f} "
              f"{row['load_s']:7.1f} {row['prefill_tps']:14.2f} {row['ttft_s']:7.2f} {row['decode_tps']:13.3f} "
              f"{row['decode_median_tps']:7.2f} "
              f"{row['decode_cpu_ms']:18.1f} "
              f"{row['peak_rss_mb']:12.0f} {(row['peak_rss_mb'] - row['base_rss_mb']) / row['file_mb']:16.2f}"
              + (f"  batch {arguments.batch}: {row['batch_decode_tps']:.3f} tok/s" if "batch_decode_tps" in row
                 else ""))
    for type_name in arguments.types.split(","):
        for round_index in range(1, arguments.rounds + 1):
            pair = {row["runner"]: row for row in rows if row["type"] == type_name and row["round"] == round_index}
            ours, peer = pair.get("tinycore"), pair.get("llama.cpp")
            if ours and peer:
                print(f"round {round_index} {type_name} tinycore / llama.cpp: decode "
                      f"{ours['decode_tps'] / peer['decode_tps']:.2f}x (median step "
                      f"{ours['decode_median_tps'] / peer['decode_median_tps']:.2f}x, CPU time per token "
                      f"{peer['decode_cpu_ms'] / ours['decode_cpu_ms']:.2f}x), prefill "
                      f"{ours['prefill_tps'] / peer['prefill_tps']:.2f}x, peak RSS "
                      f"{ours['peak_rss_mb'] / peer['peak_rss_mb']:.2f}x")

if __name__ == "__main__":
    main()
