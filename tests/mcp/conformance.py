#!/usr/bin/env python3
"""MCP conformance of the SLM gateway, driven by the official `mcp` Python SDK.

Usage:
    conformance.py [SLM_BIN] stdio
    conformance.py [SLM_BIN] http URL          (e.g. http://127.0.0.1:8765/mcp)

SLM_BIN is the `slm` binary (argument, or env SLM_BIN, default `slm` on PATH);
it runs `slm loop demo` on the server's data root.

stdio: launches `SLM_MCP_COMMAND` (shell words; default `<SLM_BIN> mcp
--profile code`) with a fresh temporary SLM_DATA_DIR, unless SLM_DATA_DIR is
set.
http: the server is already running; SLM_DATA_DIR must name its data root so
that the demo run lands in the same ledger.

Prints one line per check and `N passed, M failed` at the end; exits non-zero
on any failure.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
from typing import Any

import anyio

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

try:  # mcp >= 2 renamed the HTTP client.
    from mcp.client.streamable_http import streamable_http_client as _http_client
except ImportError:  # pragma: no cover - mcp 1.x
    from mcp.client.streamable_http import streamablehttp_client as _http_client

# Tools of the named profiles code/full/power (spec MCP-02).
PROFILE_TOOLS = {
    "slm_loop_run",
    "slm_loop_history",
    "slm_loop_show",
    "observe_bounded_loop_evidence",
    "remember",
    "recall",
}
NAME_ERR = "name must be 1\u2013128 chars"
QUERY_ERR = "gate_query must be 1\u20132000 chars"
NOTE = "Independent execution receipts decide completion; memory claims cannot pass."
DEMO_NAME = "convergence-demo"


class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def ok(self, name: str, cond: bool, detail: Any = "") -> bool:
        if cond:
            self.passed += 1
            print(f"PASS {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")
        return cond

    def eq(self, name: str, got: Any, want: Any) -> bool:
        return self.ok(name, got == want, f"got {got!r}, want {want!r}")


def payload(result: Any) -> tuple[dict, bool]:
    """The JSON object a tool answered, and its isError flag."""
    text = next(c.text for c in result.content if getattr(c, "type", "") == "text")
    value = json.loads(text)
    structured = getattr(result, "structured_content", None)
    if structured is not None and structured != value:
        raise AssertionError(f"structuredContent {structured!r} differs from text {value!r}")
    return value, bool(result.is_error)


def run_demo(slm_bin: str, data_dir: str) -> dict:
    env = dict(os.environ, SLM_DATA_DIR=data_dir)
    for var in ("SLM_LEDGER_URL", "SLM_LOOP_ENGINE_URL", "SLM_RECEIPT_URL"):
        env.pop(var, None)
    proc = subprocess.run(
        [slm_bin, "loop", "demo", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"slm loop demo exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


async def exercise(session: ClientSession, checks: Checks, slm_bin: str, data_dir: str) -> None:
    init = await session.initialize()
    checks.eq("initialize: server name", init.server_info.name, "slm-gateway")
    checks.ok("initialize: tools capability", init.capabilities.tools is not None, init.capabilities)

    listed = await session.list_tools()
    tools = {t.name: t for t in listed.tools}
    checks.eq("tools/list: exact tool names of the profile", set(tools), PROFILE_TOOLS)
    checks.ok(
        "tools/list: no check/receipt tool",
        not any(w in n for n in tools for w in ("register", "receipt", "check")),
        sorted(tools),
    )
    for name in ("slm_loop_history", "slm_loop_show"):
        ann = tools[name].annotations if name in tools else None
        checks.eq(f"tools/list: {name} readOnlyHint", getattr(ann, "read_only_hint", None), True)
    run_ann = tools["slm_loop_run"].annotations if "slm_loop_run" in tools else None
    checks.eq("tools/list: slm_loop_run readOnlyHint", getattr(run_ann, "read_only_hint", None), False)
    checks.eq(
        "tools/list: slm_loop_run destructiveHint", getattr(run_ann, "destructive_hint", None), False
    )
    schema = tools["slm_loop_run"].input_schema if "slm_loop_run" in tools else {}
    checks.eq("tools/list: slm_loop_run required", schema.get("required"), ["name", "gate_query"])

    # remember -> recall
    v, err = payload(
        await session.call_tool(
            "remember",
            {"content": "Conformance marker: the zebra ledger lives in docs/zebra.md", "tags": ["conf"]},
        )
    )
    checks.ok("remember: ok with an id", v.get("ok") is True and isinstance(v.get("id"), int) and not err, v)
    mem_id = v.get("id")
    v, err = payload(await session.call_tool("recall", {"query": "zebra ledger", "limit": 5}))
    ids = [r.get("id") for r in v.get("results", [])]
    checks.ok("recall: finds the memory", v.get("ok") is True and mem_id in ids and not err, v)
    checks.ok(
        "recall: result fields",
        bool(v.get("results"))
        and set(v["results"][0]) == {"id", "content", "score", "tags", "session_id", "created_at"}
        and "no_confident_match" in v,
        v,
    )

    # The demo, run by the CLI on the same data root, is visible over MCP.
    demo = run_demo(slm_bin, data_dir)
    checks.eq("slm loop demo: DONE", demo.get("status"), "DONE")
    run_id = demo.get("run_id")
    v, err = payload(await session.call_tool("slm_loop_history", {"name": DEMO_NAME, "limit": 50}))
    runs = {r.get("run_id"): r for r in v.get("runs", [])}
    checks.ok("slm_loop_history: lists the demo run", v.get("ok") is True and run_id in runs and not err, v)
    run = runs.get(run_id, {})
    checks.eq("slm_loop_history: run fields", set(run), {"run_id", "laps", "final", "reason", "ts"})
    checks.eq("slm_loop_history: final decision", run.get("final"), "done")
    checks.eq("slm_loop_history: count", v.get("count"), len(v.get("runs", [])))

    v, err = payload(await session.call_tool("slm_loop_show", {"run_id": run_id}))
    laps = v.get("laps", [])
    checks.ok("slm_loop_show: ok", v.get("ok") is True and not err and v.get("run_id") == run_id, v)
    checks.eq("slm_loop_show: every lap", [lap.get("lap") for lap in laps], [1, 2, 3])
    checks.ok(
        "slm_loop_show: lap fields",
        bool(laps)
        and all(
            set(lap) == {"lap", "ts", "decision", "passed", "detail", "agent_claimed_done", "tokens"}
            for lap in laps
        ),
        laps,
    )
    checks.eq("slm_loop_show: last decision", laps[-1].get("decision") if laps else None, "done")

    # Invalid calls answer structured errors, not protocol errors.
    v, err = payload(await session.call_tool("slm_loop_run", {"name": "", "gate_query": "q"}))
    checks.eq("slm_loop_run: empty name", v, {"ok": False, "error": NAME_ERR})
    checks.ok("slm_loop_run: empty name isError", err)
    v, _ = payload(await session.call_tool("slm_loop_run", {"name": "n", "gate_query": "q" * 2001}))
    checks.eq("slm_loop_run: long gate_query", v, {"ok": False, "error": QUERY_ERR})
    v, _ = payload(
        await session.call_tool("slm_loop_run", {"name": "n", "gate_query": "q", "max_wallclock_s": "abc"})
    )
    checks.eq(
        "slm_loop_run: conversion error",
        v,
        {"ok": False, "error": "could not convert string to float: 'abc'"},
    )
    v, _ = payload(await session.call_tool("slm_loop_history", {"name": "  "}))
    checks.eq("slm_loop_history: empty name", v, {"ok": False, "error": "name is required"})
    v, _ = payload(await session.call_tool("slm_loop_show", {"run_id": ""}))
    checks.eq("slm_loop_show: empty run_id", v, {"ok": False, "error": "run_id is required"})
    v, _ = payload(await session.call_tool("slm_loop_history", {"name": "x", "profile_id": 7}))
    checks.eq("slm_loop_history: profile_id not text", v, {"ok": False, "error": "profile_id must be text"})
    v, _ = payload(await session.call_tool("slm_loop_history", {"name": "x", "profile_id": "nope"}))
    checks.eq(
        "slm_loop_history: unknown profile",
        v,
        {
            "ok": False,
            "success": False,
            "code": "unknown_profile",
            "retryable": False,
            "error": "There is no profile 'nope' on this computer. A tool call never creates a profile.",
        },
    )

    # The watcher: no registered job or receipt exists here, so it runs to its
    # iteration bound and ends HALT; one progress notification per ledger row.
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    v, err = payload(
        await session.call_tool(
            "slm_loop_run",
            {"name": "conformance", "gate_query": "zebra ledger", "max_iterations": 2,
             "max_wallclock_s": 10, "poll_interval_s": 0.25},
            progress_callback=on_progress,
        )
    )
    checks.ok(
        "slm_loop_run: HALT without a receipt",
        v.get("ok") is True and not err and v.get("status") == "HALT" and v.get("passed") is False,
        v,
    )
    checks.eq(
        "slm_loop_run: result fields",
        set(v),
        {"ok", "status", "reason", "bound_reason", "receipt_reason", "passed", "laps", "run_id",
         "ledger", "note", "ledger_write_errors", "write_errors"},
    )
    checks.eq("slm_loop_run: bound_reason", v.get("bound_reason"), "max-iterations")
    checks.ok(
        "slm_loop_run: reason names the refusal",
        bool(v.get("reason")) and v.get("reason") == v.get("receipt_reason"),
        v,
    )
    checks.eq("slm_loop_run: note", v.get("note"), NOTE)
    checks.eq(
        "slm_loop_run: ledger decisions",
        [row.get("decision") for row in v.get("ledger", [])],
        ["continue", "continue", "halt"],
    )
    checks.eq("slm_loop_run: one progress notification per row", len(progress), len(v.get("ledger", [])))
    checks.ok(
        "slm_loop_run: progress messages",
        bool(progress) and all(m and m.startswith(f"lap {int(p)}: ") for p, _, m in progress),
        progress,
    )


async def main_async(argv: list[str]) -> int:
    args = list(argv)
    slm_bin = os.environ.get("SLM_BIN", "slm")
    if args and args[0] not in ("stdio", "http"):
        slm_bin = args.pop(0)
    if not args or args[0] not in ("stdio", "http") or (args[0] == "http" and len(args) != 2):
        print(__doc__, file=sys.stderr)
        return 2
    checks = Checks()
    tmp = None
    try:
        if args[0] == "stdio":
            data_dir = os.environ.get("SLM_DATA_DIR") or (tmp := tempfile.mkdtemp(prefix="slm-mcp-"))
            command = os.environ.get("SLM_MCP_COMMAND")
            words = shlex.split(command) if command else [slm_bin, "mcp", "--profile", "code"]
            env = {"SLM_DATA_DIR": data_dir}
            if os.environ.get("RUST_LOG"):
                env["RUST_LOG"] = os.environ["RUST_LOG"]
            print(f"# stdio: {' '.join(words)} (SLM_DATA_DIR={data_dir})")
            params = StdioServerParameters(command=words[0], args=words[1:], env=env)
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    await exercise(session, checks, slm_bin, data_dir)
        else:
            data_dir = os.environ.get("SLM_DATA_DIR")
            if not data_dir:
                print("http mode needs SLM_DATA_DIR (the server's data root)", file=sys.stderr)
                return 2
            print(f"# http: {args[1]} (SLM_DATA_DIR={data_dir})")
            async with _http_client(args[1]) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await exercise(session, checks, slm_bin, data_dir)
    except Exception:  # noqa: BLE001 - any failure is a failed check
        traceback.print_exc()
        checks.ok("conformance run completed", False, "exception (see above)")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 0 if checks.failed == 0 else 1


def main() -> None:
    sys.exit(anyio.run(main_async, sys.argv[1:]))


if __name__ == "__main__":
    main()
