"""`tiny llm`: run a GGUF model: one prompt streamed to stdout, an interactive chat, a benchmark, or the
OpenAI-compatible server."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # the model code is imported only when the subcommand runs
    from tinycore.llm.chat import Completion, Session


def add_llm_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `llm` subcommand to the `tiny` command's subparsers."""
    parser = commands.add_parser("llm", help="run a GGUF language model (prompt, chat, benchmark, OpenAI server)",
                                 description="Run a GGUF language model: --prompt streams one answer, no --prompt "
                                             "starts a chat, --benchmark N measures, --serve PORT serves the OpenAI "
                                             "API; --make-test-model PATH writes a small random model to try.")
    parser.add_argument("--model", help="a local .gguf file (an http(s) URL is downloaded first)")
    parser.add_argument("--make-test-model", metavar="PATH", help="write a small random-weight GGUF model to PATH "
                        "(byte-level vocabulary, so it takes any text; its answers are random bytes) and exit")
    parser.add_argument("--prompt", help="answer this prompt and exit (chat template applied unless --raw)")
    parser.add_argument("--raw", action="store_true", help="complete --prompt as plain text, without chat template")
    parser.add_argument("--system", help="a system message for chat")
    parser.add_argument("--max-context", type=int, default=4096, help="KV cache length in tokens (default 4096, "
                                                                      "capped at the model's context length)")
    parser.add_argument("--max-tokens", type=int, default=256, help="the most tokens to generate per answer")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold")
    parser.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    parser.add_argument("--device", default=None, help="device for weights and compute (default: the default)")
    parser.add_argument("--benchmark", type=int, metavar="N", help="prefill a prompt, decode N tokens, print "
                                                                   "tokens/s and time to first token")
    parser.add_argument("--serve", type=int, metavar="PORT", help="serve the OpenAI-compatible API on PORT")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    parser.add_argument("--parallel", type=int, default=4, help="with --serve: sequences decoded together, each "
                        "with a KV cache slot of --max-context tokens (default 4)")
    parser.add_argument("--max-queue", type=int, default=64, help="with --serve: sequences that may wait for a slot; "
                        "beyond them a request gets 429 (default 64)")


def load_session(path: str, max_context: int | None, device: str | None,
                 max_batch: int = 1) -> tuple[Session, str]:
    """The model (with KV cache room for `max_batch` sequences) and tokenizer of the GGUF at `path`, and the name
    the server calls it."""
    from tinycore.llm.chat import Session
    from tinycore.llm.model import Transformer
    from tinycore.llm.tokenizer import Tokenizer
    if path.startswith(("http://", "https://")):
        from tinycore.download import fetch
        path = str(fetch(path, subdir="llm"))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no model file at {path!r}: pass --model a .gguf file")
    model = Transformer.from_gguf(path, max_context=max_context, device=device, max_batch=max_batch)
    tokenizer = Tokenizer.from_metadata(model.metadata)
    template = model.metadata.get("tokenizer.chat_template")
    name = os.path.basename(path).removesuffix(".gguf")
    return Session(model, tokenizer, template if isinstance(template, str) else None), name


class _Sampling(TypedDict):
    """The sampling options of the command line, as Session.complete takes them."""
    temperature: float
    top_k: int
    top_p: float
    seed: int | None


def _sampling(arguments: argparse.Namespace) -> _Sampling:
    return {"temperature": arguments.temperature, "top_k": arguments.top_k, "top_p": arguments.top_p,
            "seed": arguments.seed}


def _answer(session: Session, ids: list[int], arguments: argparse.Namespace) -> Completion:
    from tinycore.llm.chat import Completion
    completion = Completion(prompt_tokens=len(ids))
    max_tokens = min(arguments.max_tokens, session.model.max_context - len(ids))
    for piece in session.complete(ids, completion, max_tokens, **_sampling(arguments)):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return completion


def _benchmark(session: Session, arguments: argparse.Namespace) -> int:
    model = session.model
    prompt_length = max(1, min(64, model.max_context - arguments.benchmark - 1))
    prompt = [(index * 7919) % model.config.vocab_size for index in range(prompt_length)]
    for attempt in ("warm-up", "measured"):
        model.cached_tokens = []
        start = time.perf_counter()
        first: float | None = None
        count = 0
        for _ in model.generate(prompt, arguments.benchmark + 1, temperature=0.0):
            if first is None:
                first = time.perf_counter()
            count += 1
        end = time.perf_counter()
        if attempt == "measured":
            assert first is not None
            decode = (count - 1) / (end - first) if count > 1 else 0.0
            print(f"prefill: {prompt_length} tokens, {prompt_length / (first - start):.1f} tokens/s; "
                  f"time to first token {1000 * (first - start):.1f} ms")
            print(f"decode: {count - 1} tokens, {decode:.2f} tokens/s")
    return 0


def _chat(session: Session, arguments: argparse.Namespace) -> int:
    session.chat_format  # noqa: B018 - refuse a model without a chat format before reading input
    messages: list[dict[str, str]] = [{"role": "system", "content": arguments.system}] if arguments.system else []
    print(f"chatting with {arguments.model} ({session.chat_format} format); an empty line or end of input quits",
          file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            return 0
        if not line.strip():
            return 0
        messages.append({"role": "user", "content": line})
        ids = session.chat_ids(messages)
        if len(ids) >= session.model.max_context:
            print(f"the conversation ({len(ids)} tokens) no longer fits --max-context "
                  f"{session.model.max_context}; start again with a larger one", file=sys.stderr)
            return 1
        completion = _answer(session, ids, arguments)
        messages.append({"role": "assistant", "content": "".join(completion.text)})


def _make_test_model(path: str) -> int:
    from tinycore.llm.test_model import write_test_model
    try:
        write_test_model(path, dim=64, layers=2, heads=4, kv_heads=2, hidden=128, byte_vocabulary=True, context=512)
    except OSError as error:
        print(f"tiny llm: cannot write {path!r}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote a random-weight test model to {path}; try: tiny llm --model {path} --prompt 'hello'")
    return 0


def run_llm(arguments: argparse.Namespace) -> int:
    """Run `tiny llm` with parsed arguments; returns the exit status."""
    from tinycore.llm.chat import ContextOverflowError
    from tinycore.llm.config import UnsupportedModelError
    for name in ("max_context", "max_tokens", "benchmark", "parallel"):
        value = getattr(arguments, name)
        if value is not None and value < 1:
            print(f"tiny llm: --{name.replace('_', '-')} must be at least 1, got {value}", file=sys.stderr)
            return 2
    if arguments.max_queue < 0:
        print(f"tiny llm: --max-queue must be at least 0, got {arguments.max_queue}", file=sys.stderr)
        return 2
    if arguments.make_test_model is not None:
        return _make_test_model(arguments.make_test_model)
    if arguments.model is None:
        print("tiny llm: pass --model FILE.gguf (or --make-test-model PATH to write a small one to try)",
              file=sys.stderr)
        return 2
    httpd = None
    if arguments.serve is not None:  # the address is bound first: a port in use is reported before the model loads
        from tinycore.llm.server import bind
        try:
            httpd = bind(arguments.host, arguments.serve)
        except (OSError, OverflowError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            print(f"tiny llm: cannot serve on {arguments.host}:{arguments.serve}: {reason}; pick another --serve "
                  "PORT (0 picks a free one)", file=sys.stderr)
            return 2
    try:
        session, name = load_session(arguments.model, arguments.max_context, arguments.device,
                                     arguments.parallel if httpd is not None else 1)
        if httpd is not None:
            from tinycore.llm.server import serve
            try:
                serve(session, name, arguments.serve, arguments.host, max_queued=arguments.max_queue, httpd=httpd)
            except KeyboardInterrupt:
                pass
            return 0
        if arguments.benchmark is not None:
            return _benchmark(session, arguments)
        if arguments.prompt is not None:
            if arguments.raw or session.template is None:
                ids = session.tokenizer.encode(arguments.prompt)
            else:
                messages = [{"role": "system", "content": arguments.system}] if arguments.system else []
                ids = session.chat_ids([*messages, {"role": "user", "content": arguments.prompt}])
            if len(ids) >= session.model.max_context:
                print(f"tiny llm: the prompt has {len(ids)} tokens; --max-context is {session.model.max_context}",
                      file=sys.stderr)
                return 2
            _answer(session, ids, arguments)
            return 0
        return _chat(session, arguments)
    except (FileNotFoundError, UnsupportedModelError, ContextOverflowError, ValueError) as error:
        print(f"tiny llm: {error}", file=sys.stderr)
        return 2
    finally:
        if httpd is not None:
            httpd.server_close()
