#!/usr/bin/env python3
# A fake bounded-loops-mcp for the bridge tests: newline JSON-RPC on stdio.
# Behaviour comes from ./mode.json in the cwd (the workspace).
#
# With "v2": true it answers like the real bounded-loops-mcp 0.7.6 recorded
# in tests/fixtures (the capabilities document, the 15-run listing and the
# v2 evidence by run_ref: 4 ok, 11 unavailable). "v2_runs": N lists N
# generated runs instead, each with ok v2 evidence. "v2_evidence_mode"
# makes every v2 evidence reply malformed at the MCP/JSON level (see
# malformed()); "v2_payload" alters each ok v2 evidence document (see
# v2_payload()) and records the altered document in ./sent.json.
import copy, json, os, subprocess, sys, time

V1 = "bounded-loops.dev/slm-bridge/v1"
V2 = "bounded-loops.dev/slm-bridge/v2"
mode = json.load(open("mode.json"))
FIX = os.path.dirname(mode["fixture"])
EV = json.load(open(mode["fixture"]))["demo-run"]["evidence"]
calls = open("calls.log", "a")

def fixture(name):
    return json.load(open(os.path.join(FIX, name)))

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
    elif how == "rejected":
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "boom"}], "isError": True}})
    else:
        raise SystemExit("unknown malformed mode " + how)

DEEP = "__deep__"

def v2_payload(ev, how):
    """One ok v2 evidence document altered as `how` says; a str is the
    reply text itself (for what json.dumps cannot build)."""
    ev = copy.deepcopy(ev)
    auth = ev["learning_authority"]
    node = ev["nodes"][0]
    if how == "as_recorded":
        pass
    elif how == "contract_v1":
        ev["contract"] = V1
    elif how == "contract_missing":
        del ev["contract"]
    elif how == "contract_int":
        ev["contract"] = 2
    elif how == "run_id_other":
        ev["run_id"] = "other-run"
    elif how == "run_state_list":
        ev["run_state"] = [ev["run_state"]]
    elif how == "terminal_at_int":
        ev["terminal_at"] = 1764509808
    elif how == "eligible_string":
        ev["eligible_for_learning"] = "true"
    elif how == "eligible_int":
        ev["eligible_for_learning"] = 1
    elif how == "eligible_null":
        ev["eligible_for_learning"] = None
    elif how == "eligible_false":
        ev["eligible_for_learning"] = False
    elif how == "eligible_missing":
        del ev["eligible_for_learning"]
    elif how == "demonstration_true":
        ev["demonstration"] = True
    elif how == "demonstration_string":
        ev["demonstration"] = "false"
    elif how == "outcome_int":
        ev["outcome"] = 1
    elif how == "workspace_id_int":
        ev["workspace_id"] = 7
    elif how == "graph_digest_short":
        ev["graph_digest"] = "sha256:abc"
    elif how == "receipt_missing":
        del ev["receipt"]
    elif how == "receipt_string":
        ev["receipt"] = "sha256:" + "0" * 64
    elif how == "receipt_list":
        ev["receipt"] = [ev["receipt"]]
    elif how == "receipt_null":
        ev["receipt"] = None
    elif how == "receipt_extra_key":
        ev["receipt"]["signature"] = "x"
    elif how == "sequence_bool":
        ev["receipt"]["sequence"] = True
    elif how == "sequence_string":
        ev["receipt"]["sequence"] = "21"
    elif how == "sequence_float":
        ev["receipt"]["sequence"] = 21.5
    elif how == "sequence_huge":
        ev["receipt"]["sequence"] = 2 ** 70
    elif how == "sequence_nan":
        ev["receipt"]["sequence"] = float("nan")  # json.dumps writes NaN: not JSON
    elif how == "profile_id_other":
        ev["profile_id"] = "intruder"
    elif how == "head_digest_int":
        ev["receipt"]["head_digest"] = 0
    elif how == "authority_missing":
        del ev["learning_authority"]
    elif how == "authority_string":
        ev["learning_authority"] = "execution_reliability_only"
    elif how == "authority_list":
        ev["learning_authority"] = [auth]
    elif how == "authority_null":
        ev["learning_authority"] = None
    elif how == "authority_scope_other":
        auth["scope"] = "recall_ranking"
    elif how == "authority_extra_key":
        auth["signed_by"] = "producer"
    elif how == "authority_trust_bool":
        auth["trust_class"] = True
    elif how == "nodes_string":
        ev["nodes"] = "check-a"
    elif how == "nodes_object":
        ev["nodes"] = node
    elif how == "nodes_empty":
        ev["nodes"] = []
    elif how == "nodes_10k":
        ev["nodes"] = list(range(10000))
    elif how == "nodes_10k_full":
        # 10,000 well-formed nodes: the reply text alone is over 2 MiB.
        ev["nodes"] = [dict(node, node_id="n%d" % k) for k in range(10000)]
    elif how == "node_not_object":
        ev["nodes"] = ["check-a"]
    elif how == "node_attempts_bool":
        node["attempts"] = True
    elif how == "node_gate_string":
        node["gate_passed"] = "yes"
    elif how == "node_digests_10k":
        node["artifact_digests"] = ["sha256:" + "%064x" % k for k in range(10000)]
    elif how == "route_list":
        ev["route"] = []
    elif how == "route_value_int":
        ev["route"] = {"model": 4}
    elif how == "usage_string":
        ev["usage"] = {"attempts": "3"}
    elif how == "usage_missing":
        del ev["usage"]
    elif how == "extra_key":
        ev["organization_id"] = "local-org"
    elif how == "nodes_deep":
        # The nodes list nested 100k levels deep (valid JSON).
        ev["nodes"] = DEEP
        deep = 100000
        return json.dumps({"status": "ok", "evidence": ev}).replace(
            json.dumps(DEEP), "[" * deep + "]" * deep)
    else:
        raise SystemExit("unknown v2 payload mode " + how)
    return ev

def v2_runs(n):
    """n listed runs, each a copy of the first recorded ok v2 evidence."""
    ev = next(e["evidence"] for e in fixture("bl_graph_execution_evidence.by-run_ref.json").values()
              if e["status"] == "ok")
    runs = [{k: ev[k] for k in ("run_ref", "run_id", "run_state", "terminal_at")} for _ in range(n)]
    for k, r in enumerate(runs):
        r["run_ref"] = "run-%d" % k
    return runs, ev

def v2_evidence(i, ref):
    if "v2_evidence_mode" in mode:
        malformed(i, mode["v2_evidence_mode"])
        return
    if "v2_runs" in mode:
        _, ev = v2_runs(0)
        doc = {"status": "ok", "evidence": dict(ev, run_ref=ref)}
    else:
        doc = fixture("bl_graph_execution_evidence.by-run_ref.json").get(
            ref, {"status": "unavailable", "contract": V2, "reason": "no such run in this workspace"})
    if doc["status"] == "ok" and "v2_payload" in mode:
        ev = v2_payload(doc["evidence"], mode["v2_payload"])
        if isinstance(ev, str):
            open("sent.json", "w").write(json.dumps({"too_deep": True}))
            result(i, ev)
            return
        try:
            sent = json.dumps(ev, allow_nan=False)
        except ValueError:  # NaN: what was sent is not JSON
            sent = json.dumps({"not_json": True})
        open("sent.json", "w").write(sent)
        doc = {"status": "ok", "evidence": ev}
    result(i, doc)

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
    if name == "bl_capabilities" and (mode.get("v2") or "v2_runs" in mode) and "contracts" not in mode:
        result(i, fixture("bl_capabilities.json"))
    elif name == "bl_capabilities":
        result(i, {"status": "ok", "capabilities": {"evidence_contracts": mode.get("contracts", [
            {"id": V1, "tool": "bl_graph_evidence", "operation": "observe_terminal_run", "extra": 1}])}})
    elif name == "bl_graph_terminal_runs":
        if "listing" in mode:
            malformed(i, mode["listing"])
            continue
        if "v2_runs" in mode:
            result(i, {"status": "ok", "contract": V1, "runs": v2_runs(mode["v2_runs"])[0]})
            continue
        if mode.get("v2"):
            result(i, fixture("bl_graph_terminal_runs.json"))
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
    elif name == "bl_graph_execution_evidence" and (mode.get("v2") or "v2_runs" in mode):
        v2_evidence(i, args["run_ref"])
    else:
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "Unknown tool"}], "isError": True}})
