#!/usr/bin/env bash
# MCP conformance of the SLM gateway with the official Python SDK, over stdio
# and over streamable HTTP.
#
#   tests/mcp/run.sh [SLM_BIN]
#
# SLM_BIN (argument or environment; default target/debug/slm, built when
# missing) runs `slm loop demo` and, unless overridden, the servers:
#   SLM_MCP_COMMAND       stdio server command   (default "$SLM_BIN mcp --profile code")
#   SLM_MCP_HTTP_COMMAND  HTTP server command; {grpc} and {http} are replaced by
#                         free loopback addresses
#                         (default "$SLM_BIN serve --grpc {grpc} --http {http}")
# The Python environment lives in .venv/mcp (created on first use).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

SLM_BIN="${1:-${SLM_BIN:-$root/target/debug/slm}}"
if [[ ! -x "$SLM_BIN" ]]; then
    if [[ "$SLM_BIN" == "$root/target/debug/slm" ]]; then
        cargo build --quiet -p slm --bin slm
    else
        echo "run.sh: $SLM_BIN is not an executable" >&2
        exit 2
    fi
fi
export SLM_BIN

venv="$root/.venv/mcp"
requirements="$root/tests/mcp/requirements.txt"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    echo "$want" > "$stamp"
fi
py="$venv/bin/python"

free_port() {
    "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

server_pid=""
http_dir=""
cleanup() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    [[ -n "$http_dir" ]] && rm -rf "$http_dir"
}
trap cleanup EXIT

status=0

echo "== MCP conformance over stdio"
"$py" tests/mcp/conformance.py "$SLM_BIN" stdio || status=1

echo "== MCP conformance over streamable HTTP"
http_dir=$(mktemp -d -t slm-mcp-http.XXXXXX)
grpc_addr="127.0.0.1:$(free_port)"
http_addr="127.0.0.1:$(free_port)"
default_command="$(printf '%q' "$SLM_BIN") serve --grpc {grpc} --http {http}"
command="${SLM_MCP_HTTP_COMMAND:-$default_command}"
command="${command//"{grpc}"/$grpc_addr}"
command="${command//"{http}"/$http_addr}"
echo "# server: $command (SLM_DATA_DIR=$http_dir)"
SLM_DATA_DIR="$http_dir/data" bash -c "exec $command" > "$http_dir/server.log" 2>&1 &
server_pid=$!

ready=""
for _ in $(seq 1 300); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        break
    fi
    if "$py" -c 'import socket, sys; h, p = sys.argv[1].rsplit(":", 1); socket.create_connection((h, int(p)), 0.2).close()' "$http_addr" 2>/dev/null; then
        ready=1
        break
    fi
    sleep 0.1
done
if [[ -z "$ready" ]]; then
    echo "run.sh: the HTTP server did not start; its log:" >&2
    cat "$http_dir/server.log" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

SLM_DATA_DIR="$http_dir/data" "$py" tests/mcp/conformance.py "$SLM_BIN" http "http://$http_addr/mcp" || status=1

exit "$status"
