#!/usr/bin/env bash
# The simulator's throughput and latency tail: simulate over HTTP with 2 Lua
# workers, 1 000 000 sessions and a 1 000 000-domain feed loaded, in a closed
# loop (wrk) and at a fixed offered rate (target: ≥ 10 000 requests/s at
# p99 ≤ 5 ms). docs/performance.md, "Simulator", has the figures and what
# they mean.
#
# What it does (everything in a temporary directory, removed at the end):
#  1. builds the harness bench/simulator (a Go program, not part of svc-pf);
#  2. `simulator gen`: a feed directory built with feedbuild from the real
#     lists in LISTS (default ../shared/data/feeds; read in place, never copied) plus
#     synthetic domains up to 1 000 000 keys, and two files of 200 000
#     request paths: "uniform" (clients over all sessions: the engine's
#     policy cache, 65 536 entries, mostly misses and compiles) and "hot"
#     (clients among 10 000 sessions: the cache hits). Each path is
#     GET /api/v1/simulate with ip (85 %), username (10 %) or deviceid (5 %)
#     and a name that is a feed entry (40 %), a real list's entry (15 %) or in
#     no feed (45 %);
#  3. `simulator nats`: a NATS server with JetStream in a process of its own
#     (a simulator node follows one elsewhere; EMBED_NATS=1 runs it inside
#     the server's process instead, as before 2026-11-24);
#     `simulator serve`: 1 000 000 sessions (10.x.y.z/32, 1 000 orgs, with
#     usernames, device ids and locations) in a sessionindex.Index; 131 001
#     settings documents (global, org, profile, location, username, deviceid)
#     in the "settings" bucket of that NATS server, followed by the real
#     settings read model; a feeds.Client of the feed directory; the simulator
#     wired as internal/app/simulator.go wires it (embedded default entry
#     file, WORKERS Lua workers, api_keys [bench-key]);
#  4. for each request file: a 5 s warm-up, then wrk for SECONDS with
#     CONNECTIONS connections on THREADS threads, picking a random path per
#     request (bench/simulator/wrk.lua); prints requests/s, p50/p90/p99,
#     errors, the CPU seconds the server, wrk and the rest of the machine used
#     during the run, the load average and the server's RSS.
# wrk and the server share this machine's cores (and any other job's): the
# CPU line says how they split.
#
# Usage: bench/simulator.sh [SECONDS=30] [CONNECTIONS=64]
#   CONNECTIONS is wrk's connection count (-c), or a list of them ("8 16 32"):
#   each run then gets one wrk pass per count, in order, against the same
#   server. In wrk's closed loop the mean latency is connections ÷ req/s
#   (Little's law), so p99 ≤ 5 ms needs few connections; ≥ 10 000 req/s
#   needs enough of them to keep the 2 Lua workers busy.
#   env: THREADS=2    wrk's threads (-t; at most the connection count)
#        WORKERS=2 SESSIONS=1000000 FEED_KEYS=1000000
#        RUNS="uniform hot info"  which runs, in order ("info": GET /api/v1/info,
#                    no Lua: the HTTP stack alone, for comparison)
#        MICRO=1     also print the in-process cost of each layer of one simulate
#                    (engine, Lua round trip, JSON) before the load
#        PROFILE=1   take a CPU profile (/debug/pprof/profile) during each run and
#                    print its top functions (go tool pprof -top)
#        SERVER_ENV="GOGC=… GOMEMLIMIT=… GOMAXPROCS=…"  environment of the
#                    server only (GOGC set in the script's own environment
#                    reaches the server too, and go build and the load client)
#        GCTRACE=1   run the server with GODEBUG=gctrace=1: each run prints the
#                    GC cycles it saw and how long they marked, and each
#                    fixed-rate run lines its latencies up with them
#                    (`simulator gcjoin`: percentiles of the requests due
#                    during a cycle and outside, the worst 100 ms intervals)
#        KEEP=1      keep the work directory (its path is printed)
#        RATE=N      after each uniform/hot wrk run, a fixed-rate (open-loop) run
#                    offering N requests/s for SECONDS (after a 5 s warm-up at
#                    that rate) with `simulator load` (bench/simulator/load.go):
#                    latencies from each request's due time, so queueing counts
#                    (no coordinated omission); CONNS_OPEN=256 connections.
#                    A list ("6000 8000 10000") gives one run per rate.
#        EMBED_NATS=1  the NATS server inside the simulator's process (its
#                    store then adds to the server's GC cycles)
#        SERVER_TREE=DIR  build the server (`simulator serve`) from another
#                    checkout of the repository, e.g. a baseline made with
#                    `git archive HEAD | tar -x -C DIR`; gen, wrk.lua and the
#                    load client stay this tree's, so both servers get the
#                    same data and the same load
# Needs: go, wrk (apt-get install -y wrk), curl.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
conns_list=${2:-64}
threads=${THREADS:-2}
workers=${WORKERS:-2}
sessions=${SESSIONS:-1000000}
feed_keys=${FEED_KEYS:-1000000}
runs=${RUNS:-uniform hot info}
lists=$(cd "${LISTS:-../shared/data/feeds}" 2>/dev/null && pwd) || { echo "the real lists are missing: want ${LISTS:-../shared/data/feeds} (set LISTS=DIR)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
work=$(mktemp -d)
server=""
nats=""
cleanup() {
	for pid in $server $nats; do
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid"
			wait "$pid" 2>/dev/null || true
		fi
	done
	if [ "${KEEP:-}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

tck=$(getconf CLK_TCK)
cpu_of() { # CPU seconds (user+system) of process $1 so far
	awk -v t="$tck" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"
}
machine_busy() { # busy CPU seconds of the whole machine so far
	awk -v t="$tck" '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / t }' /proc/stat
}
vm() { awk -v f="$2:" '$1 == f { printf "%d MB", $2 / 1024 }' "/proc/$1/status"; }

echo "== $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)"
go build -o "$work/simulator" ./bench/simulator
server_bin="$work/simulator"
if [ -n "${SERVER_TREE:-}" ]; then
	server_bin="$work/simulator-server"
	(cd "$SERVER_TREE" && go build -o "$server_bin" ./bench/simulator)
	echo "== server built from $SERVER_TREE"
fi
echo "== generating: feed of $feed_keys keys, request paths"
"$work/simulator" gen -work "$work" -lists "$lists" -feed-keys "$feed_keys" -sessions "$sessions" 2>&1 | sed 's/^/   /'

echo "== starting the simulator: $sessions sessions, $workers Lua workers"
micro=()
[ "${MICRO:-}" = 1 ] && micro=(-micro)
server_env=(${SERVER_ENV:-})
[ "${GCTRACE:-}" = 1 ] && server_env+=(GODEBUG=gctrace=1)
[ ${#server_env[@]} -gt 0 ] && echo "   server environment: ${server_env[*]}"
# The NATS server runs in a process of its own, as a simulator node's does
# (only `svc-pf all` embeds it): in the server's process its JetStream store
# would add to every GC cycle. EMBED_NATS=1, or a SERVER_TREE whose harness
# has no -nats flag, embeds it in the server as before.
# await_line BASE WORD PID SECONDS prints what follows "WORD " in BASE.out
# once process PID writes it; fails (with BASE.log on stderr) when PID
# exits first or SECONDS pass.
await_line() {
	local v i
	for ((i = 0; i < $4 * 10; i++)); do
		v=$(sed -n "s/^$2 //p" "$1.out")
		[ -n "$v" ] && { echo "$v"; return 0; }
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	cat "$1.log" >&2
	return 1
}
nats_flag=()
if [ "${EMBED_NATS:-}" != 1 ] && "$server_bin" serve -h 2>&1 | grep -q -- '-nats'; then
	"$work/simulator" nats -work "$work" > "$work/nats.out" 2> "$work/nats.log" &
	nats=$!
	url=$(await_line "$work/nats" NATS "$nats" 30) || { echo "the NATS server did not start" >&2; exit 1; }
	nats_flag=(-nats "$url")
	echo "   NATS server in its own process: $url"
else
	echo "   NATS server embedded in the simulator's process"
fi
env "${server_env[@]}" "$server_bin" serve -work "$work" "${nats_flag[@]}" -sessions "$sessions" -workers "$workers" "${micro[@]}" \
	> "$work/serve.out" 2> "$work/serve.log" &
server=$!
addr=$(await_line "$work/serve" READY "$server" 300) || { echo "the simulator did not start" >&2; exit 1; }
gc_lines() { grep -c '^gc [0-9]' "$work/serve.log" || true; }
# cpu_split WHAT CLIENT SECONDS prints where the cores' time went over a
# run: the server's, the load client's ($w), everyone else's and idle,
# from the counters read before ($s0, $m0) and after ($s1, $m1).
cpu_split() {
	awk -v s0="$s0" -v s1="$s1" -v m0="$m0" -v m1="$m1" -v w="$w" -v d="$3" -v c="$(nproc)" \
		-v what="$1" -v client="$2" 'BEGIN {
		srv = s1 - s0; all = m1 - m0; other = all - srv - w; if (other < 0) other = 0
		idle = c * d - all; if (idle < 0) idle = 0
		printf "   CPU over %s (%d cores × %d s = %d core-s): server %.1f, %s %.1f, everything else %.1f, idle %.1f\n",
			what, c, d, c * d, srv, client, w, other, idle
	}'
}

gc_summary() { # GC cycles logged after the first $1 of serve.log: count, wall ms marking, last heap
	awk -v from="$1" '/^gc [0-9]/ { n++; if (n <= from) next; c++
		split($5, t, "+"); ms += t[1] + t[2] + t[3]; heap = $11 }
		END { if (c) printf "   GC during the run: %d cycles, %.0f ms of wall time in them, last heap %s MB\n", c, ms, heap
		      else print "   GC during the run: no cycle" }' "$work/serve.log"
}
grep -E 'sessions indexed|settings loaded|feed loaded|read models loaded|forced GC' "$work/serve.log" | sed 's/^[^ ]* level=INFO /   /'
grep '^MICRO' "$work/serve.out" | sed 's/^/   /' || true
base="http://$addr"
curl -sf "$base/api/v1/info" | sed 's/^/   info: /'
echo
echo "   one answer: $(curl -sf -H 'X-API-Key: bench-key' "$base$(sed -n 1p "$work/paths-hot.txt")" | head -c 300)…"

echo /api/v1/info > "$work/paths-info.txt"
for run in $runs; do
	paths="$work/paths-$run.txt"
	warm=1
	for conns in $conns_list; do
	t=$((threads < conns ? threads : conns))
	if [ "$run" = info ]; then
		echo "== info (the HTTP stack without Lua, for comparison): wrk -t$t -c$conns -d${seconds}s, GET /api/v1/info"
	else
		echo "== $run: wrk -t$t -c$conns -d${seconds}s (after a 5 s warm-up), GET /api/v1/simulate, random paths of $(basename "$paths")"
	fi
	if [ "$warm" = 1 ]; then # once per run: the later counts follow a warm server
		wrk -t"$t" -c"$conns" -d5s -s bench/simulator/wrk.lua "$base" -- "$paths" > /dev/null
		warm=0
	fi
	gc0=$(gc_lines)
	load0=$(cut -d' ' -f1 /proc/loadavg)
	s0=$(cpu_of "$server")
	m0=$(machine_busy)
	prof=""
	if [ "${PROFILE:-}" = 1 ]; then
		prof="$work/cpu-$run.prof"
		psecs=$((seconds > 10 ? seconds - 5 : seconds))
		curl -sf -H 'X-API-Key: bench-key' -o "$prof" "$base/debug/pprof/profile?seconds=$psecs" &
		profiler=$!
		curl -sf -H 'X-API-Key: bench-key' -o "$prof.allocs" "$base/debug/pprof/allocs?seconds=$psecs" &
		profiler2=$!
	fi
	/usr/bin/time -f '%U %S' -o "$work/wrk.time" \
		wrk -t"$t" -c"$conns" -d"${seconds}s" -s bench/simulator/wrk.lua "$base" -- "$paths" > "$work/wrk.out"
	s1=$(cpu_of "$server")
	m1=$(machine_busy)
	load1=$(cut -d' ' -f1-3 /proc/loadavg)
	w=$(awk '{ printf "%.2f", $1 + $2 }' "$work/wrk.time")
	sed -n 's/^RESULT /   /p' "$work/wrk.out"
	cpu_split "the run" wrk "$seconds"
	echo "   load average: $load0 before, $load1 after; server RSS $(vm "$server" VmRSS) (peak $(vm "$server" VmHWM))"
	grep 'msg=runtime' "$work/serve.log" | tail -n 1 | sed 's/^.*msg=runtime /   server, last 10 s: /'
	if [ "${GCTRACE:-}" = 1 ]; then gc_summary "$gc0"; fi
	if [ -n "$prof" ]; then
		wait "$profiler" "$profiler2" || true
		echo "   CPU profile of the server (go tool pprof -top):"
		go tool pprof -top -nodecount 25 "$server_bin" "$prof" 2>/dev/null | sed -n '4,40p' | sed 's/^/     /'
		echo "   by cumulative time:"
		go tool pprof -top -cum -nodecount 40 "$server_bin" "$prof" 2>/dev/null | sed -n '6,50p' | sed 's/^/     /'
		echo "   bytes allocated over the profile (go tool pprof -top -sample_index=alloc_space -cum):"
		go tool pprof -top -cum -sample_index=alloc_space -nodecount 25 "$server_bin" "$prof.allocs" 2>/dev/null | sed -n '4,35p' | sed 's/^/     /'
	fi
	done
	[ "$run" = info ] && continue
	for rate in ${RATE:-}; do
		echo "== $run at a fixed rate: simulator load -rate $rate -duration ${seconds}s -conns ${CONNS_OPEN:-256} (after a 5 s warm-up at that rate)"
		gc0=$(gc_lines)
		s0=$(cpu_of "$server")
		m0=$(machine_busy)
		t0=$(date +%s.%N)
		/usr/bin/time -f '%U %S' -o "$work/load.time" \
			"$work/simulator" load -addr "$addr" -paths "$paths" -rate "$rate" -duration "${seconds}s" \
			-warmup 5s -conns "${CONNS_OPEN:-256}" -timeline "$work/timeline-$run-$rate.txt" > "$work/load.out"
		s1=$(cpu_of "$server")
		m1=$(machine_busy)
		w=$(awk '{ printf "%.2f", $1 + $2 }' "$work/load.time")
		sed -n 's/^RESULT /   /p' "$work/load.out"
		# wall time of warm-up + run: longer than SECONDS + 5 when the server
		# falls behind and the backlog drains after the last request is due
		d=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", b - a + 0.5 }')
		cpu_split "warm-up + run" "load client" "$d"
		echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg); server RSS $(vm "$server" VmRSS) (peak $(vm "$server" VmHWM))"
		if [ "${GCTRACE:-}" = 1 ]; then
			gc_summary "$gc0"
			"$work/simulator" gcjoin -timeline "$work/timeline-$run-$rate.txt" -serve-log "$work/serve.log" \
				-start "$(sed -n 's/^START //p' "$work/serve.out")" | sed 's/^GCJOIN /   /'
		fi
		[ "${KEEP:-}" = 1 ] || rm -f "$work/timeline-$run-$rate.txt"
	done
done
