#!/usr/bin/env bash
# A large feed replaced by a new version on a node: the node's resident memory
# before (steady) and during the replacement (peak), and their ratio (target:
# peak ≤ 1.3 × steady). docs/performance.md, "Feed replacement", has the
# figures.
#
# What it does (in a work directory, removed at the end unless CACHE is set):
#  1. builds svc-pf and the harness bench/feedswap (a Go program, not part of
#     svc-pf); `feedswap gen` writes N synthetic domains (default 10 000 000)
#     in three variants: base, tenth (10 % of the domains changed: 5 %
#     renamed, i.e. removed and added, 5 % re-coded) and all (every domain
#     renamed);
#  2. `svc-pf feed build` of base (version 1, a snapshot), then, in two
#     copies of that directory, of tenth and of all (version 2 each: what
#     feed build writes for that change — a delta for tenth; a snapshot and
#     its catch-up delta for all). The builds take minutes at 10 M: set
#     CACHE=DIR to keep them (and the binaries' inputs) for the next run;
#  3. for each scenario in RUNS (default "tenth all"): a directory holding
#     version 1 served by `svc-pf feed serve` on 127.0.0.1, a node (`feedswap
#     node`: a feeds.Client following it over HTTP, polling every second,
#     as svc-pf resolver/simulator wire it) loads it; after SETTLE seconds
#     (default 30) its VmRSS is the steady figure; then the peak is reset
#     (`echo 5 > /proc/PID/clear_refs`, which resets VmHWM) and version 2's
#     files are copied in, feed.json last (renamed into place); VmRSS is also
#     sampled every 50 ms until the node serves version 2 (TIMEOUT seconds,
#     default 900); the peak is the larger of VmHWM and the samples.
# Prints per scenario: steady RSS, peak RSS, ratio, the replacement's time,
# RSS 10 s after it.
#
# Usage: bench/feedswap.sh [N=10000000]
#   env: RUNS="tenth all"  SETTLE=30  TIMEOUT=900  CACHE=DIR  NODE_ENV="GOGC=…"
#        NODE_TREE=DIR  build the node from another checkout (e.g. the code
#                       before a change: git worktree add DIR COMMIT); this
#                       tree's bench/feedswap is copied into it if missing
#        LOGS=DIR       keep each node's stderr as DIR/node-<scenario>.err
# Needs: go, curl. Linux (/proc).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000000}
runs=${RUNS:-tenth all}
settle=${SETTLE:-30}
timeout=${TIMEOUT:-900}
if [ -n "${CACHE:-}" ]; then
	work=$CACHE/$n
	mkdir -p "$work"
else
	work=$(mktemp -d)
fi
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${CACHE:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/svc-pf" ./cmd/svc-pf
go build -o "$work/feedswap" ./bench/feedswap
node_bin=$work/feedswap
if [ -n "${NODE_TREE:-}" ]; then
	[ -d "$NODE_TREE/bench/feedswap" ] || cp -r bench/feedswap "$NODE_TREE/bench/"
	(cd "$NODE_TREE" && go build -o "$work/feedswap-node" ./bench/feedswap)
	node_bin=$work/feedswap-node
	echo "== node built from $NODE_TREE ($(git -C "$NODE_TREE" rev-parse --short HEAD))"
fi
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), N=$n, commit $(git rev-parse --short HEAD)"

build() { # build DIR VARIANT
	"$work/svc-pf" feed build --dir "$1" --name big --title 1=one --title 2=two --title 3=three --title 4=four \
		domains:1:$work/$2/c1.txt domains:2:$work/$2/c2.txt domains:3:$work/$2/c3.txt domains:4:$work/$2/c4.txt |
		grep -E '^(version|manifest)'
}
if [ ! -f "$work/feed-base/feed.json" ]; then
	"$work/feedswap" gen -n "$n" -variant base -out "$work/base"
	start=$SECONDS
	build "$work/feed-base" base
	echo "   build of base: $((SECONDS - start)) s"
fi
for v in $runs; do
	if [ ! -f "$work/feed-$v/feed.json" ] || ! grep -q '"version": 2' "$work/feed-$v/feed.json"; then
		"$work/feedswap" gen -n "$n" -variant "$v" -out "$work/$v"
		rm -rf "$work/feed-$v"
		cp -a "$work/feed-base" "$work/feed-$v"
		start=$SECONDS
		build "$work/feed-$v" "$v"
		echo "   build of $v: $((SECONDS - start)) s"
	fi
done

# The scratch of this run (live directory, logs): its own, so that runs
# sharing a CACHE do not mix.
run=$(mktemp -d "$work/run.XXXXXX")
trap 'cleanup; rm -rf "$run"' EXIT
rss() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; } # kB

for v in $runs; do
	rm -rf "$run/live"
	mkdir -p "$run/live/big"
	cp "$work/feed-base"/{feed.json,feed-codes.json,snapshot_1.gz} "$run/live/big/"
	: >"$run/node.out"
	"$work/svc-pf" feed serve --dir "$run/live" --listen 127.0.0.1:0 2>"$run/serve.log" &
	pids+=($!)
	addr=
	for _ in $(seq 100); do
		addr=$(sed -n 's/.*serve listening" address=\([^ ]*\).*/\1/p' "$run/serve.log")
		[ -n "$addr" ] && break
		sleep 0.1
	done
	[ -n "$addr" ] || { echo "feed serve did not start: $(cat "$run/serve.log")" >&2; exit 1; }
	env ${NODE_ENV:-} "$node_bin" node -url "http://$addr/big/" >"$run/node.out" 2>"$run/node.err" &
	node=$!
	pids+=($node)
	start=$SECONDS
	until grep -q '^version 1 ' "$run/node.out"; do
		kill -0 $node 2>/dev/null || { echo "node died: $(tail -5 "$run/node.err")" >&2; exit 1; }
		[ $((SECONDS - start)) -lt "$timeout" ] || { echo "node did not load version 1 in $timeout s" >&2; exit 1; }
		sleep 0.2
	done
	echo "== $v: version 1 loaded in $((SECONDS - start)) s; settling $settle s"
	sleep "$settle"
	steady=$(rss $node VmRSS)
	hwm_before=$(rss $node VmHWM)
	reset=yes
	echo 5 >"/proc/$node/clear_refs" 2>/dev/null || reset=no
	# Version 2: its files, then the manifest by rename (as feed build does).
	for f in "$work/feed-$v"/*.gz "$work/feed-$v/feed-codes.json"; do
		cp "$f" "$run/live/big/"
	done
	cp "$work/feed-$v/feed.json" "$run/live/big/.feed.json.tmp"
	mv "$run/live/big/.feed.json.tmp" "$run/live/big/feed.json"
	start_ms=$(date +%s%3N)
	peak=0
	while ! grep -q '^version 2 ' "$run/node.out"; do
		kill -0 $node 2>/dev/null || { echo "node died: $(tail -5 "$run/node.err")" >&2; exit 1; }
		[ $(( ($(date +%s%3N) - start_ms) / 1000 )) -lt "$timeout" ] || { echo "node did not load version 2 in $timeout s" >&2; exit 1; }
		r=$(rss $node VmRSS)
		[ "$r" -gt "$peak" ] && peak=$r
		sleep 0.05
	done
	took=$(( $(date +%s%3N) - start_ms ))
	hwm=$(rss $node VmHWM)
	[ "$reset" = yes ] && [ "$hwm" -gt "$peak" ] && peak=$hwm
	sleep 10
	after=$(rss $node VmRSS)
	how=$(grep 'msg="feed updated"' "$run/node.err" | tail -1 | grep -o 'via=[a-z]*' || true)
	echo "   $(grep '^version 2 ' "$run/node.out"), $how, in $((took / 1000)).$((took % 1000 / 100)) s (HWM reset: $reset; HWM before the reset $((hwm_before / 1024)) MB)"
	awk -v s="$steady" -v p="$peak" -v a="$after" -v v="$v" 'BEGIN {
		printf "   %s: steady %.0f MB, peak %.0f MB, ratio %.2f; 10 s after: %.0f MB\n", v, s/1024, p/1024, p/s, a/1024 }'
	kill $node; wait $node 2>/dev/null || true
	[ -z "${LOGS:-}" ] || cp "$run/node.err" "$LOGS/node-$v.err"
	kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
	pids=()
done
