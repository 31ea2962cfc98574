"""Timing libraries against each other in one process: each case once per round per library, after `settle()`, the
libraries' order turning from round to round, printed as a markdown row with the paired median of the peer's time
over tinycore's (above 1: tinycore is faster). bench_conv.py and bench_patterns.py share it."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from settle import settle


def print_header(peer: str = "torch") -> None:
    """The markdown table's header (case, tinycore ms, the peer's ms, the paired ratio)."""
    print(f"| case | tinycore ms | {peer} ms | {peer} / tinycore, paired median |")
    print("|---|---|---|---|")


def time_pair(name: str, calls: dict[str, Callable[[], object]], rounds: int, peer: str = "torch") -> None:
    """Run `calls` ({"tinycore": ..., peer: ...}) `rounds` times each, interleaved, and print the case's row."""
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {library: [] for library in calls}
    libraries = list(calls)
    for round_number in range(rounds):
        turn = round_number % len(libraries)
        for library in libraries[turn:] + libraries[:turn]:
            settle()
            started = time.perf_counter()
            calls[library]()
            times[library].append(time.perf_counter() - started)
    paired = statistics.median(theirs / ours for ours, theirs in zip(times["tinycore"], times[peer], strict=True))
    print(f"| {name} | {statistics.median(times['tinycore']) * 1e3:.2f} | "
          f"{statistics.median(times[peer]) * 1e3:.2f} | {paired:.2f} |", flush=True)


def main(description: str, cases: list[str], calls_of: Callable[[str], dict[str, Callable[[], object]]],
         rounds: int) -> None:
    """The command line of a paired bench: `--rounds N` (default `rounds`) and `--cases NAME ...` among `cases`."""
    import argparse
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--cases", nargs="+", default=cases, choices=cases)
    arguments = parser.parse_args()
    print_header()
    for name in arguments.cases:
        time_pair(name, calls_of(name), arguments.rounds)
