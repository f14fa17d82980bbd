#!/usr/bin/env bash
# Orgmanager benchmarks: the organisation API's performance targets
# (docs/performance.md, "Organisation manager", has them and the figures).
#  1. Go benchmarks over a real loopback HTTP server, SQLite and PostgreSQL:
#     batch of 10 000 upserts, effective ranges with force_latest=1 at 100 000
#     overrides, write → effective ranges no longer dirty at 50 writes/s.
#  2. The built binary under `hey`: single override GET from 32 concurrent
#     clients (p50 target ≤ 1 ms, no errors).
# PostgreSQL runs when SVCPF_TEST_POSTGRES_URL is set.
# Usage: bench/orgmanager.sh [requests-for-hey]
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-100000}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

echo "== Go benchmarks ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
go test -run '^$' -bench 'Batch10k|EffectiveRangesLatest100k' -benchtime 10x ./internal/orgmanager/ | grep -E '^Benchmark'
go test -run '^$' -bench 'WriteToDeployed' -benchtime 500x ./internal/orgmanager/ | grep -E '^Benchmark'

echo "== GET /org/acme/overrides?cidr=… from 32 concurrent clients (wrk, then hey)"
go build -o "$out/svc-pf" ./cmd/svc-pf
# wrk (apt-get install wrk) costs the 2-core machine far less CPU than hey,
# which competes with the server for the same cores; both are reported.
WRK=$(command -v wrk || true)
HEY=$(command -v hey || true)
if [ -z "$HEY" ]; then GOBIN="$out" go install github.com/rakyll/hey@v0.1.5; HEY="$out/hey"; fi

# The admin token the orgmanager is started with (SVCPF_ADMIN_TOKEN, docs/access.md).
token="svcpf_$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')_$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
auth="Authorization: Bearer $token"

run_hey() { # $1 = label, $2 = database url
  cat > "$out/om.yaml" <<YAML
http:
  address: 127.0.0.1:0
database:
  url: $2
YAML
  SVCPF_ADMIN_TOKEN=$token "$out/svc-pf" orgmanager -c "$out/om.yaml" 2> "$out/om.log" &
  local pid=$!
  local addr=""
  for _ in $(seq 1 100); do
    addr=$(sed -n 's/.*orgmanager listening.* address=\([^ ]*\).*/\1/p' "$out/om.log" | head -n1)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { cat "$out/om.log"; return 1; }
  local base="http://$addr"
  curl -sf -H "$auth" -X PUT "$base/org/acme" >/dev/null
  curl -sf -H "$auth" -X PATCH "$base/org/acme/prefixes" -d '{"add":["10.0.0.0/8"]}' >/dev/null
  python3 - "$base" "$auth" <<'PY'
import json, sys, urllib.request
items = [{"cidr": f"10.{i//256}.{i%256}.0/24", "username": f"user-{i}", "meta": {"x-ref": str(i)}} for i in range(10000)]
req = urllib.request.Request(sys.argv[1] + "/org/acme/overrides/batch", data=json.dumps({"data": items}).encode(), method="POST")
req.add_header(*sys.argv[2].split(": ", 1))
urllib.request.urlopen(req).read()
PY
  echo "-- $1"
  if [ -n "$WRK" ]; then
    echo "   wrk -t1 -c32 -d10s --latency"
    "$WRK" -t1 -c32 -d10s --latency -H "$auth" "$base/org/acme/overrides?cidr=10.7.42.0/24" | grep -E '50%|90%|99%|Requests/sec|Non-2xx|Socket errors'
  fi
  echo "   hey -n $requests -c 32"
  "$HEY" -n "$requests" -c 32 -H "$auth" "$base/org/acme/overrides?cidr=10.7.42.0/24" > "$out/hey.txt"
  grep -E 'Requests/sec|Average:| 50%| 90%| 99%' "$out/hey.txt"
  sed -n '/Status code distribution/,$p' "$out/hey.txt"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

run_hey sqlite "sqlite:$out/orgmanager.db"
if [ -n "${SVCPF_TEST_POSTGRES_URL:-}" ]; then
  schema="bench_$$"
  psql "${SVCPF_TEST_POSTGRES_URL}" -qc "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema"
  sep='?'; case "$SVCPF_TEST_POSTGRES_URL" in *\?*) sep='&';; esac
  run_hey postgres "${SVCPF_TEST_POSTGRES_URL}${sep}search_path=$schema"
  psql "${SVCPF_TEST_POSTGRES_URL}" -qc "DROP SCHEMA $schema CASCADE"
fi
