"""The conformance summary: results counted by category (pass / fail / not applicable), as a table or JSON.

`ConformanceReport` is a pytest plugin object: the suite's conftest registers one per run. It records each test's
outcome under its category (the `conformance_category` marker of its module) and prints the table at the end of
the run; with `--tiny-json=PATH` it also writes the JSON summary there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from tinycore.testing import CATEGORIES, NOT_APPLICABLE, NOT_BUILT

if TYPE_CHECKING:
    import pytest


@dataclass
class Outcome:
    """One check: its pytest id, category, outcome ("passed", "failed", "not applicable") and message."""

    nodeid: str
    category: str
    outcome: str
    message: str = ""


class ConformanceSummary(TypedDict):
    """What a conformance run found, as printed and as written to the JSON file."""
    device: str
    capabilities: dict[str, object]
    categories: dict[str, dict[str, int]]
    totals: dict[str, int]
    failures: list[dict[str, str]]
    not_applicable: list[dict[str, str]]
    ok: bool


@dataclass(eq=False)
class ConformanceReport:
    """Collects outcomes while pytest runs and summarises them by category."""

    device: str
    capabilities: dict[str, object] = field(default_factory=dict)
    categories: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    json_path: str | None = None

    # ---- pytest hooks ----

    def record_items(self, items: list[pytest.Item]) -> None:
        """Remember the category of every collected check."""
        for item in items:
            marker = item.get_closest_marker("conformance_category")
            self.categories[item.nodeid] = marker.args[0] if marker is not None else "other"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record the outcome of one phase of a check (a failing setup or teardown fails the check)."""
        category = self.categories.get(report.nodeid, "other")
        name = short_id(report.nodeid)
        if report.skipped:
            reason = _skip_reason(report)
            if reason.startswith((NOT_APPLICABLE, NOT_BUILT)):
                self.outcomes[report.nodeid] = Outcome(name, category, "not applicable", reason)
            else:
                self.outcomes[report.nodeid] = Outcome(name, category, "failed",
                                                       f"skipped without a declared reason: {reason}")
        elif report.failed:
            previous = self.outcomes.get(report.nodeid)
            if previous is None or previous.outcome != "failed":
                self.outcomes[report.nodeid] = Outcome(name, category, "failed", _failure_message(report))
        elif report.when == "call":
            self.outcomes[report.nodeid] = Outcome(name, category, "passed")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Print the summary table (and write the JSON file when asked)."""
        terminalreporter.write_line("")
        for line in format_summary(self.summary()).splitlines():
            terminalreporter.write_line(line)
        if self.json_path:
            with open(self.json_path, "w") as file:
                json.dump(self.summary(), file, indent=2)

    # ---- results ----

    def summary(self) -> ConformanceSummary:
        """Counts by category, every failure and not-applicable check with its message, and the overall verdict."""
        table: dict[str, dict[str, int]] = {}
        for category in (*CATEGORIES, *sorted({outcome.category for outcome in self.outcomes.values()}
                                              - set(CATEGORIES))):
            table[category] = {"passed": 0, "failed": 0, "not applicable": 0}
        for outcome in self.outcomes.values():
            table[outcome.category][outcome.outcome] += 1
        failures = [{"test": item.nodeid, "category": item.category, "message": item.message}
                    for item in self.outcomes.values() if item.outcome == "failed"]
        skipped = [{"test": item.nodeid, "category": item.category, "reason": item.message}
                   for item in self.outcomes.values() if item.outcome == "not applicable"]
        totals = {key: sum(row[key] for row in table.values()) for key in ("passed", "failed", "not applicable")}
        return {"device": self.device, "capabilities": self.capabilities, "categories": table, "totals": totals,
                "failures": failures, "not_applicable": skipped, "ok": totals["failed"] == 0 and totals["passed"] > 0}


def short_id(nodeid: str) -> str:
    """A check's pytest id without the directories: `test_ops.py::test_binary[add]`."""
    path, separator, rest = nodeid.partition("::")
    return path.replace("\\", "/").rsplit("/", 1)[-1] + separator + rest


def _skip_reason(report: pytest.TestReport) -> str:
    """The reason given to pytest.skip, from a skipped report."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    return str(longrepr)


def _failure_message(report: pytest.TestReport) -> str:
    """The first lines of a failure's exception message (what was asked, what was found)."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1:]
    text = message if isinstance(message, str) else " ".join(message)
    lines = [line for line in text.splitlines() if line.strip()]
    prefix = "" if report.when == "call" else f"(during {report.when}) "
    return prefix + " / ".join(lines[:4])


def format_summary(summary: ConformanceSummary) -> str:
    """The summary as a table by category, then each failure with its message, then the not-applicable reasons."""
    capabilities = summary.get("capabilities") or {}
    inferred = " (inferred from the renderer: the device declares none)" if capabilities.get("inferred") else ""
    lines = [f"tinycore conformance: {summary['device']}{inferred}"]
    headers = ("CATEGORY", "PASS", "FAIL", "N/A")
    rows = [(name, str(row["passed"]), str(row["failed"]), str(row["not applicable"]))
            for name, row in summary["categories"].items()]
    totals = summary["totals"]
    rows.append(("total", str(totals["passed"]), str(totals["failed"]), str(totals["not applicable"])))
    widths = [max(len(header), *(len(row[column]) for row in rows)) for column, header in enumerate(headers)]
    lines.append("  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if summary["failures"]:
        lines.append("")
        lines.append("failures:")
        for failure in summary["failures"]:
            lines.append(f"  [{failure['category']}] {failure['test']}")
            lines.append(f"      {failure['message']}")
    if summary["not_applicable"]:
        reasons: dict[str, int] = {}
        for item in summary["not_applicable"]:
            key = f"[{item['category']}] {item['reason']}"
            reasons[key] = reasons.get(key, 0) + 1
        lines.append("")
        lines.append("not applicable:")
        for reason, count in reasons.items():
            lines.append(f"  {reason}" + (f" (x{count})" if count > 1 else ""))
    lines.append("")
    verdict = "CONFORMS" if summary["ok"] else ("FAILS" if totals["failed"] else "NOTHING RAN")
    lines.append(f"{summary['device']}: {verdict} ({totals['passed']} passed, {totals['failed']} failed, "
                 f"{totals['not applicable']} not applicable)")
    return "\n".join(lines)


__all__ = ["ConformanceReport", "Outcome", "format_summary"]
