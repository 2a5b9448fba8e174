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

def listing(runs):
    return {"status": "ok", "contract": V1, "runs": runs}

def raw_result_line(i, text_json):
    # One JSON-RPC result line whose text item is the given JSON string literal.
    return '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}],"isError":false}}\n' % (
        json.dumps(i), text_json)

def malformed(i, how):
    """Malformed producer output for the bad-input tests (listing or evidence)."""
    deep = 100000
    if how == "nonjson":
        result(i, "this is not JSON {")
    elif how == "json_array":
        result(i, "[1, 2, 3]")
    elif how == "json_string":
        result(i, json.dumps("runs"))
    elif how == "status_int":
        result(i, {"status": 1, "contract": V1, "runs": []})
    elif how == "contract_list":
        result(i, {"status": "ok", "contract": [V1], "runs": []})
    elif how == "runs_string":
        result(i, {"status": "ok", "contract": V1, "runs": "all of them"})
    elif how == "runs_null":
        result(i, {"status": "ok", "contract": V1, "runs": None})
    elif how == "runs_object":
        result(i, {"status": "ok", "contract": V1, "runs": {"run_ref": "run-0"}})
    elif how == "run_not_object":
        result(i, listing(["run-0"]))
    elif how == "run_ref_int":
        result(i, listing([{"run_ref": 5}]))
    elif how == "run_ref_missing":
        result(i, listing([{"run_id": "graph-run"}]))
    elif how == "wrong_types_10k":
        result(i, listing([k for k in range(10000)]))
    elif how == "deep_text":
        # Valid JSON nested 100k levels deep inside the one text item.
        sys.stdout.write(raw_result_line(i, json.dumps(
            '{"status":"ok","contract":"%s","runs":%s%s}' % (V1, "[" * deep, "]" * deep))))
        sys.stdout.flush()
    elif how == "deep_envelope":
        # The JSON-RPC envelope itself nested 100k levels deep.
        sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"{}"}],"isError":false,"x":%s%s}}\n'
                         % (json.dumps(i), "[" * deep, "]" * deep))
        sys.stdout.flush()
    elif how == "huge_50mb":
        # One 50 MB line: a valid JSON-RPC reply whose text is 50 MB.
        sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % json.dumps(i))
        chunk = "z" * (1024 * 1024)
        for _ in range(50):
            sys.stdout.write(chunk)
        sys.stdout.write('"}],"isError":false}}\n')
        sys.stdout.flush()
    elif how == "endless_line":
        # A reply that never ends: one line that grows forever.
        sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % json.dumps(i))
        chunk = "w" * 65536
        while True:
            sys.stdout.write(chunk)
    elif how == "endless_lines":
        # Never answers: an endless stream of short garbage lines.
        junk = ("garbage, not JSON-RPC\n" * 4096)
        while True:
            sys.stdout.write(junk)
    elif how == "endless_silence":
        # Starts a reply, then neither finishes it nor closes stdout.
        sys.stdout.write('{"jsonrpc":"2.0","id":%s,"res' % json.dumps(i))
        sys.stdout.flush()
        time.sleep(1000)
    elif how == "wrong_id":
        # A well-formed reply to a request that was never made.
        result(12345678, listing([]))
        time.sleep(1000)
    elif how == "evidence_status_int":
        result(i, {"status": 7, "evidence": {}})
    elif how == "evidence_list":
        result(i, {"status": "ok", "evidence": [1, 2]})
    elif how == "evidence_null":
        result(i, {"status": "ok", "evidence": None})
    elif how == "evidence_string":
        result(i, {"status": "ok", "evidence": "{}"})
    elif how == "two_items":
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "{}"}, {"type": "text", "text": "{}"}], "isError": False}})
    elif how == "no_items":
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [], "isError": False}})
    elif how == "content_not_list":
        send({"jsonrpc": "2.0", "id": i, "result": {"content": "text", "isError": False}})
    else:
        raise SystemExit("unknown malformed mode " + how)

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
        if "listing" in mode:
            malformed(i, mode["listing"])
            continue
        runs = [{"run_ref": f"run-{k}", "run_id": "graph-run", "run_state": "SUCCEEDED",
                 "terminal_at": "2026-11-30T13:36:38Z"} for k in range(mode.get("runs", 3))]
        result(i, {"status": "ok", "contract": V1, "runs": runs})
    elif name == "bl_graph_evidence":
        ref = args["run_ref"]
        if "evidence_mode" in mode:
            malformed(i, mode["evidence_mode"])
        elif ref in mode.get("unavailable", []):
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
