"""Server throughput: total decoded tokens/s of `tiny llm --serve` with N concurrent streaming clients against one
client, on a llama model with random weights (bench_llm.py's writer, cached in --directory).

    python bench/bench_server.py                           # 1B Q4_0, 1 client then 8, 32 tokens each
    python bench/bench_server.py --size small --types Q8_0 --clients 1,4,8 --tokens 64 --rounds 3

Each client streams a completion of exactly --tokens tokens (greedy; `stop` cannot end it: the prompt differs per
client, and a random model's end-of-sequence token is counted if it comes: the usage block gives what was decoded).
The server runs in a child process with `--parallel` equal to the largest client count, so every client has a slot;
a warm-up at each client count captures the jitted step for that many rows before anything is timed. A round times
each client count once, in increasing order; the ratio column is the count's total tokens/s over one client's in
the same round. Time to first token and failed requests are reported too. The machine's load average is printed
per round, since other work on the cores changes every figure.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_llm import SIZES, write_model  # noqa: E402

PROMPT_CHARACTERS = 12
"""Every prompt's length in characters by default (one token each in bench_llm's byte-fallback vocabulary, plus
BOS): at most the server's STEP_PREFILL tokens, so prompts are fed through the shared decode steps and the figure is
the decode throughput; --prompt-characters 40 or more sends them through the chunked prefill as well."""


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(path: str, port: int, parallel: int, context: int) -> subprocess.Popen[bytes]:
    """`tiny llm --serve` on 127.0.0.1:`port`, returned once it answers /v1/models (or raised when it exits)."""
    tiny = os.path.join(os.path.dirname(sys.executable), "tiny")
    command = [tiny, "llm", "--model", path, "--serve", str(port), "--parallel", str(parallel),
               "--max-context", str(context)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}): "
                               f"{process.stderr.read().decode()[-2000:] if process.stderr else ''}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/v1/models")
            if connection.getresponse().status == 200:
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise TimeoutError("the server did not answer within 600 s")


class ClientResult:
    """What one streaming request saw: decoded tokens (from its usage block), first-token and total seconds."""

    def __init__(self) -> None:
        self.tokens, self.first, self.total, self.error = 0, 0.0, 0.0, ""


def stream_one(port: int, prompt: str, tokens: int, result: ClientResult, start: threading.Barrier) -> None:
    """Stream one greedy completion of `tokens` tokens into `result` after every client reached `start`."""
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start.wait()
    began = time.perf_counter()
    try:
        connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            result.error = f"status {response.status}: {response.read()[:200]!r}"
            return
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("choices") and not result.first:
                result.first = time.perf_counter() - began
            if event.get("usage"):
                result.tokens = int(event["usage"]["completion_tokens"])
        result.total = time.perf_counter() - began
    except (OSError, ValueError, http.client.HTTPException) as error:
        result.error = repr(error)
    finally:
        connection.close()


def run_clients(port: int, clients: int, tokens: int, tag: str,
                characters: int = PROMPT_CHARACTERS) -> tuple[float, list[ClientResult]]:
    """`clients` concurrent streams started together; (wall seconds until the last finished, their results)."""
    results = [ClientResult() for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)
    # distinct prompts (no request reuses another's cached prefix) of one length, so the warm-up compiled the
    # prefill kernels every timed request runs
    prompts = [(f"{tag}/{index}: " + "once upon a time, " * 4)[:characters] for index in range(clients)]
    threads = [threading.Thread(target=stream_one, args=(port, prompts[index], tokens, results[index], barrier))
               for index in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began, results


def main() -> None:
    """Parse the options, write or reuse the model, and print one table row per round and client count."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    parser.add_argument("--types", default="Q4_0", help="comma-separated GGUF types (one server each)")
    parser.add_argument("--clients", default="1,8", help="comma-separated client counts (1 is the reference)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens each client decodes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-characters", type=int, default=PROMPT_CHARACTERS,
                        help="each prompt's length (one token per character, plus BOS)")
    parser.add_argument("--directory", default=tempfile.gettempdir(), help="where the model files are cached")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    arguments = parser.parse_args()
    counts = sorted({int(count) for count in arguments.clients.split(",")} | {1})
    print("| type | round | load | clients | total tok/s | vs 1 client | median TTFT s | failed |")
    print("|---|---|---|---|---|---|---|---|")
    for type_name in arguments.types.split(","):
        path = os.path.join(arguments.directory, f"bench_llm_{arguments.size}_{type_name}.gguf")
        if not os.path.exists(path):
            write_model(path, arguments.size, type_name)
        port = free_port()
        server = start_server(path, port, max(counts), context=256 + 2 * arguments.tokens)
        try:
            for count in counts:  # warm-up: each row count's jitted step captured before timing
                run_clients(port, count, arguments.tokens, "w", arguments.prompt_characters)
            for round_number in range(1, arguments.rounds + 1):
                single = 0.0
                for count in counts:
                    load = os.getloadavg()[0]
                    wall, results = run_clients(port, count, arguments.tokens, f"r{round_number}",
                                                arguments.prompt_characters)
                    failed = sum(1 for result in results if result.error or not result.tokens)
                    rate = sum(result.tokens for result in results) / wall
                    single = rate if count == 1 else single
                    firsts = [result.first for result in results if result.first]
                    row = {"type": type_name, "round": round_number, "load": round(load, 1), "clients": count,
                           "tokens_per_second": round(rate, 2), "ratio": round(rate / single, 2) if single else 0.0,
                           "ttft": round(statistics.median(firsts), 3) if firsts else None, "failed": failed}
                    print(f"| {type_name} | {round_number} | {row['load']} | {count} | {row['tokens_per_second']} | "
                          f"{row['ratio']}x | {row['ttft']} | {failed} |", flush=True)
                    for result in results:
                        if result.error:
                            print(f"  error: {result.error}", file=sys.stderr)
                    if arguments.json:
                        print(json.dumps(row))
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
