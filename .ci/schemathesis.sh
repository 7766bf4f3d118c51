#!/usr/bin/env bash
# The API against its own OpenAPI document: starts a daemon on the bundled example config (on a
# fresh SQLite file, a free 127.0.0.1 port, the API token), checks the document it serves at
# /v1/openapi.json with an independent validator (openapi-spec-validator), then runs
# schemathesis against it with a bounded number of examples per operation. Fails on any 5xx and
# on any answer that contradicts the document. Called by .ci/run; runs by itself as well
# (`bash .ci/schemathesis.sh`). The Python tools go into a venv outside the tree
# ($SWITCHYARD_CI_VENV, default /tmp/switchyard-ci-venv), installed from PyPI with pip.
set -euo pipefail
cd "$(dirname "$0")/.."

examples="${SCHEMATHESIS_EXAMPLES:-25}"
venv="${SWITCHYARD_CI_VENV:-/tmp/switchyard-ci-venv}"
target="${CARGO_TARGET_DIR:-target}"
token=ci-api-token-0001

if ! [ -x "$venv/bin/schemathesis" ] || ! [ -x "$venv/bin/openapi-spec-validator" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        'schemathesis>=4.32,<5' 'openapi-spec-validator>=0.7,<1'
fi
cargo build --locked -p switchyard --quiet

work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The example as shipped, on another port, with a fresh SQLite file in the scratch folder.
SWITCHYARD_API_TOKEN=$token "$target/debug/switchyard" serve --config examples/switchyard.toml \
    --listen "127.0.0.1:$port" --database "sqlite://$work/switchyard.db" >"$work/daemon.log" 2>&1 &
daemon=$!
stop() {
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 120); do
    curl -fsS "$base/healthz" >/dev/null 2>&1 && break
    if ! kill -0 "$daemon" 2>/dev/null; then
        echo "the daemon did not start:"; cat "$work/daemon.log"; exit 1
    fi
    sleep 0.5
done
curl -fsS "$base/v1/openapi.json" -o "$work/openapi.json"

echo "openapi-spec-validator: $base/v1/openapi.json"
"$venv/bin/openapi-spec-validator" "$work/openapi.json"

# not_a_server_error: no 5xx; response_schema_conformance: every answer matches the schema of
# its documented status (or the `default` refusal's). One worker: CPython 3.11 before 3.11.8
# can fail parsing in two threads at once ("AST constructor recursion depth mismatch",
# python/cpython#106905), which Hypothesis does when it describes its strategies.
status=0
"$venv/bin/schemathesis" run "$base/v1/openapi.json" \
    --header "Authorization: Bearer $token" \
    --checks not_a_server_error,response_schema_conformance \
    --max-examples "$examples" \
    --phases examples,coverage,fuzzing \
    --seed "${SCHEMATHESIS_SEED:-39}" \
    --generation-database none \
    --request-timeout 30 \
    --workers 1 \
    --no-color || status=$?
if [ "$status" -ne 0 ]; then
    echo "== the daemon's log (last 50 lines)"
    tail -n 50 "$work/daemon.log"
fi
exit "$status"
