#!/usr/bin/env bash
# Sessions at scale: N RADIUS-shaped sessions (default 10 000 000; a /32 or a
# /64 each, a username and an msisdn device id, producer "radius") written
# through a real IP Mapper's set-session-batch into a real nats-server
# (JetStream, file storage, in a temporary directory), then: the load rate,
# the IP Mapper's resident memory, a node read model's cold start (a fresh
# process, from its start to ready with every session loaded from the
# bucket) and resident memory, and the IP Mapper's own restart.
# docs/performance.md, "Sessions at scale", has the figures.
#
# The harness is bench/sessions (a Go program, not part of svc-pf); its
# children (the IP Mapper, the nodes) inherit the environment, so GOMEMLIMIT
# set here applies to them.
#
# Usage: bench/sessions.sh [N]
#   env: NATS_SERVER=path (default: nats-server on PATH, else built with go run
#        at the version go.mod requires)  NODE_RUNS=2  DIR=dir (keep the store;
#        with SKIP_LOAD=1, measure the cold starts of a store a previous run kept;
#        with FROM=k, load sessions k to N-1 into a kept store whose load stopped)
#        SNAPSHOT=0 (no IP Mapper snapshot, and any earlier one removed: the
#        node cold starts replay the stream; by default the IP Mapper writes one, after the
#        load, or, with SKIP_LOAD=1, after an IP Mapper restart on the kept store;
#        SNAPSHOT=keep with SKIP_LOAD=1: start from the snapshot a previous run wrote)
# Runs under flock /tmp/svcpf-bench.lock. Needs: go; Linux (/proc).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-${N:-10000000}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/sessions-bench" ./bench/sessions
server=${NATS_SERVER:-$(command -v nats-server || true)}
if [ -z "$server" ]; then
  version=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
  GOBIN="$work" go install "github.com/nats-io/nats-server/v2@$version"
  server="$work/nats-server"
fi
args=(run -n "$n" -nats-server "$server" -node-runs "${NODE_RUNS:-2}")
if [ -n "${DIR:-}" ]; then
  mkdir -p "$DIR"
  args+=(-dir "$DIR")
fi
if [ -n "${FROM:-}" ]; then
  args+=(-from "$FROM")
fi
case "${SNAPSHOT:-1}" in
  0) args+=(-snapshot=false) ;;
  keep) args+=(-keep-snapshot) ;;
esac
if [ -n "${SKIP_LOAD:-}" ]; then
  args+=(-skip-load)
fi
echo "$(date -u +%FT%TZ) N=$n GOMEMLIMIT=${GOMEMLIMIT:-} GOGC=${GOGC:-} $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
flock /tmp/svcpf-bench.lock "$work/sessions-bench" "${args[@]}"
