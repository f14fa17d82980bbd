#!/usr/bin/env bash
# RADIUS accounting figures (docs/radius.md, "Performance"):
#  1. acknowledged Accounting-Requests per second: BenchmarkAcknowledged
#     (internal/radius) — a real IP Mapper on an embedded NATS server with
#     JetStream, 32 NAS sockets each keeping 64 Starts outstanding, every
#     Start a new session; reports acked/s, requests per IP Mapper call and
#     the mean call duration. Target ≥ 20 000/s.
#  2. Start → policy applied: BenchmarkRadiusStartToPolicy (internal/app) —
#     `svc-pf all` with radius:, the time from sending a Start for a new
#     address to the first DNS query from that address that gets the
#     realm's organisation's user policy (polled every 2 ms). Target p99
#     ≤ 100 ms.
#
# Usage: bench/radius.sh [REQUESTS] [STARTS]   (defaults 200000 and 1000)
# Runs under flock /tmp/svcpf-bench.lock: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-200000}
starts=${2:-1000}
exec flock /tmp/svcpf-bench.lock bash -c "
go test -run '^\$' -bench '^BenchmarkAcknowledged\$' -benchtime ${requests}x -count 3 ./internal/radius/ | grep -E '^(Benchmark|ok|FAIL)'
go test -run '^\$' -bench '^BenchmarkRadiusStartToPolicy\$' -benchtime ${starts}x -count 1 ./internal/app/ | grep -E '^(Benchmark|ok|FAIL)'
"
