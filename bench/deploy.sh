#!/usr/bin/env bash
# Deploy path and node read model benchmarks (issue: IP Mapper and deploy
# over NATS). Everything runs in-process on an embedded NATS server.
#  1. override write → visible in a node's subscriber index, 50 writes/s;
#  2. a batch of 10 000 overrides → all visible in the index;
#  3. the session index at 1 000 000 sessions: memory, IP lookup;
#  4. a node's cold load of 1 000 000 sessions from the bucket.
# Usage: bench/deploy.sh [quick]   (quick skips the 1M benchmarks)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
go test -run '^$' -bench 'WriteToIndex' -benchtime 500x ./internal/app/ | grep -E '^Benchmark'
go test -run '^$' -bench 'BatchToIndex' -benchtime 5x ./internal/app/ | grep -E '^Benchmark'
go test -run '^$' -bench 'SetSessionBatch10k' -benchtime 5x ./internal/ipmapper/ | grep -E '^Benchmark'
[ "${1:-}" = quick ] && exit 0
go test -run '^$' -bench 'Memory1M|LookupIP1M' -benchmem ./internal/sessionindex/ | grep -E '^Benchmark'
go test -run '^$' -bench 'ColdLoad' -benchtime 1x -timeout 30m ./internal/readmodel/ | grep -E '^Benchmark'
