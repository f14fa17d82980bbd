#!/usr/bin/env bash
# Recursive mode against its peers: `svc-pf resolver` with mode: recursive
# (dnssec off and validate), unbound (validating) and PowerDNS Recursor
# (validating), side by side in one run, all resolving in the recursor
# tests' own DNS lab (internal/dnslab's standard lab, run by
# bench/recursorlab: nsd servers for a signed root, test. and the NSEC3
# zone nsec3.test., same root hints and trust anchor for every resolver).
# Absolute figures on this shared 2-core machine swing between runs:
# compare within a run.
#
# Goals, as figures within one run:
#   miss:  svc-pf (validate) CPU per query ≤ unbound's; validation's cost
#          per miss (svc-pf validate − off) ≤ 10 µs;
#   hit:   svc-pf validate = svc-pf off = svc-pf forward mode, CPU per
#          query (within the noise).
#
# Phases, each server in turn:
#   miss-wild  every query a new name under the wildcard *.wild.nsec3.test.
#              (TAG-N.wild.nsec3.test. A: NOERROR, the answer signed as a
#              wildcard expansion, with the NSEC3 record that proves no
#              closer name exists);
#   miss-nx    every query a new NXDOMAIN under nsec3.test. (TAG-N.nsec3.test.
#              A: three NSEC3 records prove it);
#              dnsperf -T 1 -c CLIENTS -q 100 -n 1 over MISS_NAMES names
#              (a fresh random TAG per server and phase; the run ends at
#              DURATION seconds or when the names run out). Nothing can be
#              answered from a cache: the zone is NSEC3-signed, so unbound's
#              aggressive NSEC does not apply, pdns_recursor's aggressive
#              NSEC/NSEC3 cache is off (aggressive-nsec-cache-size=0) and
#              svc-pf synthesises nothing. The nsd column (lab CPU per
#              query) shows each resolver sending the lab about the same;
#   hit        HIT_NAMES names under the wildcard, asked twice to warm the
#              caches, then dnsperf -T 1 -c CLIENTS -q 100 -l DURATION over
#              them; also svc-pf in forward mode (forwarders: the zone's
#              nsd), the figure recursive mode's hits are compared with.
# CPU per query: utime+stime of the server's process (all threads) from
# /proc/PID/stat before and after the run, divided by the answered queries.
#
# svc-pf asks the lab through forward_zones (".", test., nsec3.test., each
# to its nsd, recurse: false: authoritative servers, asked without RD) while
# unbound and pdns_recursor iterate from the root hints: svc-pf's binary
# does not ask nameservers on loopback addresses found by iteration (the
# switch that allows it is for tests only), and the lab is on 127.53.N.x.
# With warm caches both ways send one query per miss to nsec3.test.'s
# server, and validation is the same (the chain of trust from the root's
# DS down; the DS of each zone asked at its parent).
#
# Usage: bench/recursor.sh   (root: the lab uses port 53 on 127.53.N.x)
#   env: DURATION=8 CLIENTS=16 MISS_NAMES=60000 HIT_NAMES=1000
#        SERVERS="svcpf-off svcpf-validate unbound pdns"
#        PHASES="miss-wild miss-nx hit"
#        DNSPERF_OPTS=""  more dnsperf options for every run (e.g. -Q 500: a
#                         rate limit, for a check of the script, not a figure)
#        SVCPF_BIN=PATH   use this svc-pf binary instead of building one
#        KEEP=1           keep the work directory
#        PROFILE=DIR      for each svc-pf run: perf record -g of the process
#                         (DIR/PHASE.SERVER.perf) and its /metrics before and
#                         after (DIR/PHASE.SERVER.metrics.{0,1}: outgoing
#                         queries per miss); perf's own cost inflates that
#                         run's CPU figure: a profile run is not a figure run
# Runs under flock /tmp/svcpf-bench.lock (it takes the lock itself).
# Needs: go, nsd, ldnsutils, dnsperf, knot-dnsutils, unbound, pdns-recursor.
set -euo pipefail
if [ "${SVCPF_BENCH_LOCKED:-}" != 1 ]; then
	exec env SVCPF_BENCH_LOCKED=1 flock /tmp/svcpf-bench.lock "$0" "$@"
fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

DURATION=${DURATION:-8}
CLIENTS=${CLIENTS:-16}
MISS_NAMES=${MISS_NAMES:-60000}
HIT_NAMES=${HIT_NAMES:-1000}
SERVERS=${SERVERS:-svcpf-off svcpf-validate unbound pdns}
PHASES=${PHASES:-miss-wild miss-nx hit}
HZ=$(getconf CLK_TCK)

log() { echo "$*" >&2; }
[ "$(id -u)" = 0 ] || { log "run as root (port 53 on 127.53.N.x)"; exit 1; }
for p in dnsperf kdig nsd ldns-signzone unbound pdns_recursor; do
	command -v "$p" > /dev/null || { log "$p missing (apt-get install dnsperf knot-dnsutils nsd ldnsutils unbound pdns-recursor)"; exit 1; }
done

WORK=$(mktemp -d /tmp/svcpf-bench-recursor.XXXXXX)
declare -A PID=() ADDR=()
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
		kill -9 "$p" 2> /dev/null || true
	done
	if [ "${KEEP:-}" = 1 ]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# cpu_ticks PID — utime+stime (clock ticks) of the process, all its threads
# (live or exited) and its descendants (the lab's nsd processes).
cpu_ticks() {
	{ cat /proc/[0-9]*/stat 2> /dev/null || true; } | awk -v root="$1" '
		{ pid = $1; line = $0; sub(/^.*\) /, "", line); split(line, f, " ")
		  ppid[pid] = f[2]; t[pid] = f[12] + f[13] }
		END { want[root] = 1
			do { more = 0; for (p in ppid) if (!(p in want) && (ppid[p] in want)) { want[p] = 1; more = 1 } } while (more)
			s = 0; for (p in want) if (p in t) s += t[p]; print s }'
}

# ------------------------------------------------------------- build, lab
if [ -z "${SVCPF_BIN:-}" ]; then
	log "== go build ./cmd/svc-pf ./bench/recursorlab"
	(cd "$repo" && go build -o "$WORK/svc-pf" ./cmd/svc-pf)
	SVCPF_BIN=$WORK/svc-pf
fi
(cd "$repo" && go build -o "$WORK/recursorlab" ./bench/recursorlab)

mkdir -p "$WORK/lab"
# The lab lives while its standard input is open: a FIFO held by this
# script.
mkfifo "$WORK/lab.in"
"$WORK/recursorlab" -out "$WORK/lab" < "$WORK/lab.in" > "$WORK/lab.out" 2> "$WORK/lab.err" &
PID[lab]=$!
pids+=("${PID[lab]}")
exec 9> "$WORK/lab.in"
for _ in $(seq 1 300); do
	grep -q '^ready' "$WORK/lab.out" 2> /dev/null && break
	kill -0 "${PID[lab]}" 2> /dev/null || { cat "$WORK/lab.err" >&2; exit 1; }
	sleep 0.1
done
grep -q '^ready' "$WORK/lab.out" || { log "the lab did not start"; cat "$WORK/lab.err" >&2; exit 1; }
# shellcheck source=/dev/null
. "$WORK/lab/lab.env"
HINTS=$WORK/lab/root.hints
ANCHOR=$WORK/lab/root.anchor
# The resolvers' addresses: in the lab's /24 (held by the lab's lock),
# port 53. dnslab keeps .250 and .251 for its reference resolvers.
ADDR[svcpf-off]=$LAB_NET.240
ADDR[svcpf-validate]=$LAB_NET.241
ADDR[svcpf-fwd]=$LAB_NET.242
ADDR[unbound]=$LAB_NET.250
ADDR[pdns]=$LAB_NET.251
declare -A HTTP=([svcpf-off]=127.0.0.1:18940 [svcpf-validate]=127.0.0.1:18941 [svcpf-fwd]=127.0.0.1:18942)

# ---------------------------------------------------------------- servers
start_svcpf() { # NAME
	local name=$1 conf=$WORK/$1.yaml
	{
		cat <<-EOF
			dns:
			  listen: ["${ADDR[$name]}:53"]
			http:
			  address: ${HTTP[$name]}
			api:
			  key: bench
			allow_from: ["127.0.0.0/8"]
			activity: {enabled: false}
			log:
			  level: warn
		EOF
		if [ "$name" = svcpf-fwd ]; then
			printf 'forwarders: ["%s:53"]\n' "$LAB_SLD"
		else
			cat <<-EOF
				mode: recursive
				dnssec: ${name#svcpf-}
				root_hints_file: $HINTS
				trust_anchors_file: $ANCHOR
				forward_zones:
				  - {zone: ".", forwarders: ["$LAB_ROOT"]}
				  - {zone: "test.", forwarders: ["$LAB_TLDTEST"]}
				  - {zone: "nsec3.test.", forwarders: ["$LAB_SLD"]}
			EOF
		fi
	} > "$conf"
	"$SVCPF_BIN" resolver -c "$conf" > "$WORK/$name.log" 2>&1 &
	PID[$name]=$!
	pids+=("${PID[$name]}")
}

start_unbound() {
	local d=$WORK/unbound
	mkdir -p "$d"
	cat > "$d/unbound.conf" <<-EOF
		server:
		  interface: ${ADDR[unbound]}
		  port: 53
		  interface-automatic: no
		  do-ip6: no
		  access-control: 127.0.0.0/8 allow
		  do-not-query-localhost: no
		  root-hints: "$HINTS"
		  trust-anchor-file: "$ANCHOR"
		  module-config: "validator iterator"
		  username: ""
		  chroot: ""
		  directory: "$d"
		  pidfile: "$d/unbound.pid"
		  logfile: "$d/unbound.log"
		  use-syslog: no
		  verbosity: 1
		  num-threads: 2
		  so-reuseport: yes
		  msg-cache-size: 256m
		  rrset-cache-size: 512m
		  aggressive-nsec: no
		  local-zone: "test." nodefault
		remote-control:
		  control-enable: no
	EOF
	unbound -d -c "$d/unbound.conf" 2>> "$d/unbound.log" &
	PID[unbound]=$!
	pids+=("${PID[unbound]}")
}

start_pdns() {
	local d=$WORK/pdns ds
	mkdir -p "$d"
	# The lab's root DS as the only trust anchor: "owner" "content".
	ds=$(awk '{ o = $1; c = ""; for (i = 1; i <= NF; i++) if ($i == "DS") { for (j = i + 1; j <= NF; j++) c = c (c == "" ? "" : " ") $j } print "addTA(\"" o "\", \"" c "\")" }' "$ANCHOR")
	printf 'clearTA()\n%s\n' "$ds" > "$d/recursor.lua"
	cat > "$d/recursor.conf" <<-EOF
		local-address=${ADDR[pdns]}
		local-port=53
		allow-from=127.0.0.0/8
		dont-query=
		hint-file=$HINTS
		lua-config-file=$d/recursor.lua
		dnssec=validate
		aggressive-nsec-cache-size=0
		threads=2
		pdns-distributes-queries=no
		reuseport=yes
		max-cache-entries=2000000
		max-packetcache-entries=2000000
		socket-dir=$d
		daemon=no
		write-pid=no
		disable-syslog=yes
		quiet=yes
		loglevel=4
		security-poll-suffix=
		serve-rfc1918=no
	EOF
	pdns_recursor --config-dir="$d" > "$d/recursor.log" 2>&1 &
	PID[pdns]=$!
	pids+=("${PID[pdns]}")
}

# wait_ready NAME — until it answers www.nsec3.test. A (this also fills its
# caches with the root's, test.'s and nsec3.test.'s keys and servers).
wait_ready() {
	local end=$((SECONDS + 20))
	while [ $SECONDS -lt $end ]; do
		kill -0 "${PID[$1]}" 2> /dev/null || { log "$1 exited"; cat "$WORK/$1.log" "$WORK/$1/"*.log >&2 2> /dev/null || true; exit 1; }
		if kdig @"${ADDR[$1]}" www.nsec3.test A +short +time=1 +retry=0 2> /dev/null | grep -q '^192\.0\.2\.'; then
			return 0
		fi
		sleep 0.2
	done
	log "$1 does not answer"
	exit 1
}

# flags NAME QNAME — the answer's header flags and rcode, asked with DO.
flags() {
	kdig @"${ADDR[$1]}" "$2" A +dnssec +time=2 +retry=0 2> /dev/null |
		awk '/status:/ { s = $6; sub(/;$/, "", s) } /^;; Flags:/ { f = $0; sub(/^;; Flags: /, "", f); sub(/;.*$/, "", f) } END { print s, f }' | tr -d ','
}

servers_all=$SERVERS
case " $PHASES " in *" hit "*) servers_all="svcpf-fwd $servers_all" ;; esac
for s in $servers_all; do
	case $s in
	svcpf-*) start_svcpf "$s" ;;
	unbound) start_unbound ;;
	pdns) start_pdns ;;
	*) log "unknown server $s"; exit 1 ;;
	esac
done
for s in $servers_all; do wait_ready "$s"; done

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); unbound $(unbound -V | awk 'NR == 1 { print $2 }'), pdns_recursor $(pdns_recursor --version 2>&1 | awk '{ for (i = 1; i < NF; i++) if ($i == "Recursor") { print $(i + 1); exit } }')"
echo "== DNSSEC check (asked with DO; AD expected from validating servers only):"
for s in $servers_all; do
	echo "   $s: wildcard $(flags "$s" "check.wild.nsec3.test"), NXDOMAIN $(flags "$s" "check-nx.nsec3.test")"
done

# ---------------------------------------------------------------- runs
# run PHASE SERVER FILE DNSPERF-OPTS… — one dnsperf run, one table row.
run() {
	local phase=$1 s=$2 file=$3
	shift 3
	local before lab_before after lab_after out=$WORK/$phase.$s.dnsperf
	local perf_pid=
	if [ -n "${PROFILE:-}" ] && [ -n "${HTTP[$s]:-}" ]; then
		mkdir -p "$PROFILE"
		curl -s "http://${HTTP[$s]}/metrics" > "$PROFILE/$phase.$s.metrics.0" || true
		perf record -q -g -p "${PID[$s]}" -o "$PROFILE/$phase.$s.perf" > /dev/null 2>&1 &
		perf_pid=$!
		sleep 0.5
	fi
	before=$(cpu_ticks "${PID[$s]}")
	lab_before=$(cpu_ticks "${PID[lab]}")
	# shellcheck disable=SC2086 # DNSPERF_OPTS: words
	dnsperf -s "${ADDR[$s]}" -p 53 -d "$file" -T 1 -c "$CLIENTS" -q 100 -t 5 ${DNSPERF_OPTS:-} "$@" > "$out" 2>&1 || true
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid" 2> /dev/null || true
		wait "$perf_pid" 2> /dev/null || true
		curl -s "http://${HTTP[$s]}/metrics" > "$PROFILE/$phase.$s.metrics.1" || true
	fi
	after=$(cpu_ticks "${PID[$s]}")
	lab_after=$(cpu_ticks "${PID[lab]}")
	awk -v phase="$phase" -v s="$s" -v t=$((after - before)) -v lt=$((lab_after - lab_before)) -v hz="$HZ" '
		/Queries completed:/ { c = $3 }
		/Queries lost:/ { l = $3 }
		/Queries per second:/ { q = $4 }
		/Run time \(s\):/ { r = $4 }
		/Response codes:/ { line = $0; sub(/^.*Response codes: */, "", line); n = split(line, part, /, /)
			for (i = 1; i <= n; i++) { split(part[i], w, " "); rc = rc (i > 1 ? " " : "") w[1] ":" w[2] } }
		END {
			cpu = (c > 0 ? t / hz * 1e6 / c : 0); lab = (c > 0 ? lt / hz * 1e6 / c : 0)
			printf "| %s | %s | %d | %d | %.0f | %.1f | %.2f | %.1f | %s |\n", phase, s, c, l, q, cpu, (r > 0 ? t / hz / r : 0), lab, rc
			printf "%s %s %.3f\n", phase, s, cpu > "/dev/stderr"
		}' "$out" 2>> "$WORK/cpu"
}

echo
echo "| phase | server | answered | lost | qps | CPU µs/query | cores | lab (nsd) CPU µs/query | rcodes |"
echo "|---|---|---|---|---|---|---|---|---|"
for phase in $PHASES; do
	case $phase in
	miss-wild | miss-nx)
		for s in $SERVERS; do
			tag=m$RANDOM$RANDOM
			if [ "$phase" = miss-wild ]; then
				awk -v n="$MISS_NAMES" -v tag="$tag" 'BEGIN { for (i = 0; i < n; i++) printf "%s-%d.wild.nsec3.test A\n", tag, i }' > "$WORK/names"
			else
				awk -v n="$MISS_NAMES" -v tag="$tag" 'BEGIN { for (i = 0; i < n; i++) printf "%s-%d.nsec3.test A\n", tag, i }' > "$WORK/names"
			fi
			run "$phase" "$s" "$WORK/names" -n 1 -l "$DURATION"
		done
		;;
	hit)
		awk -v n="$HIT_NAMES" 'BEGIN { for (i = 0; i < n; i++) printf "hit-%d.wild.nsec3.test A\n", i }' > "$WORK/hits"
		for s in svcpf-fwd $SERVERS; do
			dnsperf -s "${ADDR[$s]}" -p 53 -d "$WORK/hits" -T 1 -c "$CLIENTS" -q 100 -n 2 > /dev/null 2>&1 || true
			run hit "$s" "$WORK/hits" -l "$DURATION"
		done
		;;
	*) log "unknown phase $phase"; exit 1 ;;
	esac
done

# ---------------------------------------------------------------- goals
echo
awk '
	{ cpu[$1 " " $2] = $3 }
	function have(k) { return (k in cpu) && cpu[k] > 0 }
	END {
		for (p = 1; p <= 2; p++) {
			ph = (p == 1 ? "miss-wild" : "miss-nx")
			v = ph " svcpf-validate"; o = ph " svcpf-off"; u = ph " unbound"
			if (have(v) && have(u))
				printf "goal %s: svc-pf validate CPU/query ÷ unbound = %.2f (≤ 1: %s)\n", ph, cpu[v] / cpu[u], (cpu[v] <= cpu[u] ? "met" : "MISSED")
			if (have(v) && have(o))
				printf "goal %s: validation per miss (validate − off) = %.1f µs (≤ 10: %s)\n", ph, cpu[v] - cpu[o], (cpu[v] - cpu[o] <= 10 ? "met" : "MISSED")
		}
		if (have("hit svcpf-validate") && have("hit svcpf-off"))
			printf "hit: svc-pf validate ÷ off CPU/query = %.2f\n", cpu["hit svcpf-validate"] / cpu["hit svcpf-off"]
		if (have("hit svcpf-off") && have("hit svcpf-fwd"))
			printf "hit: svc-pf recursive (off) ÷ forward CPU/query = %.2f\n", cpu["hit svcpf-off"] / cpu["hit svcpf-fwd"]
		if (have("hit svcpf-validate") && have("hit svcpf-fwd"))
			printf "hit: svc-pf recursive (validate) ÷ forward CPU/query = %.2f\n", cpu["hit svcpf-validate"] / cpu["hit svcpf-fwd"]
	}' "$WORK/cpu"
