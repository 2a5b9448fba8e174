#!/usr/bin/env python3
# A fake bounded-loops-mcp for the bridge tests: newline JSON-RPC on stdio.
# Behaviour comes from ./mode.json in the cwd (the workspace).
import json, os, subprocess, sys, time

V1 = "bounded-loops.dev/slm-bridge/v1"
mode = json.load(open("mode.json"))
EV = json.load(open(mode["fixture"]))["demo-run"]["evidence"]
calls = open("calls.log", "a")

def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()

def result(i, doc):
    text = doc if isinstance(doc, str) else json.dumps(doc, indent=2)
    send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": text}], "isError": False}})

for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    i, m = msg["id"], msg["method"]
    if m == "initialize":
        if mode.get("hang"):
            g = subprocess.Popen(["sleep", "1000"])
            open("pids", "w").write(f"{os.getpid()} {g.pid}")
            time.sleep(1000)
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {"listChanged": False}}, "serverInfo": {"name": "fake", "version": "0.0.1"}}})
        continue
    if m != "tools/call":
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "Method not found"}})
        continue
    name, args = msg["params"]["name"], msg["params"].get("arguments", {})
    calls.write(json.dumps({"name": name, "args": args}) + "\n")
    calls.flush()
    if name == "bl_capabilities":
        result(i, {"status": "ok", "capabilities": {"evidence_contracts": mode.get("contracts", [
            {"id": V1, "tool": "bl_graph_evidence", "operation": "observe_terminal_run", "extra": 1}])}})
    elif name == "bl_graph_terminal_runs":
        runs = [{"run_ref": f"run-{k}", "run_id": "graph-run", "run_state": "SUCCEEDED",
                 "terminal_at": "2026-11-30T13:36:38Z"} for k in range(mode.get("runs", 3))]
        result(i, {"status": "ok", "contract": V1, "runs": runs})
    elif name == "bl_graph_evidence":
        ref = args["run_ref"]
        if ref in mode.get("unavailable", []):
            result(i, {"status": "unavailable", "contract": V1, "reason": "this run is RUNNING, not finished"})
        elif ref == mode.get("huge"):
            result(i, "x" * (2 * 1024 * 1024 + 1))
        elif ref == mode.get("giant"):
            sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % json.dumps(i))
            for _ in range(8):
                sys.stdout.write("y" * (1024 * 1024))
            sys.stdout.write('"}],"isError":false}}\n')
            sys.stdout.flush()
        elif ref == mode.get("rejected"):
            send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "boom"}], "isError": True}})
        else:
            ev = dict(EV)
            ev["run_ref"] = ref
            ev["receipt"] = dict(ev["receipt"], head_digest="sha256:" + mode.get("head", "b" * 64))
            ev["command"] = "rm -rf /"
            ev["path"] = "/secret/path"
            result(i, {"status": "ok", "evidence": ev})
    else:
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "Unknown tool"}], "isError": True}})
