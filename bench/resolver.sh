#!/usr/bin/env bash
# The resolver against its peers: dnsperf against `svc-pf
# resolver`, pdns-recursor (Debian's package, as configured by default and
# tuned with --pdns-distributes-queries=no --reuseport=yes) and unbound
# (Debian's package), side by side in one run, one local authoritative
# server (nsd) behind all of them. Absolute figures on this shared 2-core
# machine swing by ±30 % between runs: compare the servers within a run.
#
# Goals, as ratios within one run:
#   cache hits:   svc-pf qps ≥ 1.1 × the best peer's; svc-pf CPU/query ≤ the
#                 best peer's;
#   cache misses: svc-pf CPU/query ≤ unbound's.
#
# What it does (everything in a temporary directory, removed at the end):
#  1. installs what is missing (apt-get: dnsperf pdns-recursor unbound nsd
#     knot-dnsutils nftables python3 curl), with Debian's services kept from
#     starting (policy-rc.d) and stopped/disabled where systemd runs: they
#     would take port 53 on 127.0.0.1 and ::1; ours never use port 53;
#  2. builds svc-pf (`go build ./cmd/svc-pf`, or takes SVCPF_BIN) and checks
#     that it has `svc-pf resolver` (`svc-pf help` lists it); without it,
#     prints "svc-pf resolver not available in this build" and measures the
#     peers only. SVCPF_CMD replaces the resolver's command line; the built
#     svc-pf still builds the feed and runs the control plane;
#  3. generates the zone bench.test. (HIT_NAMES names with A and AAAA, TTL
#     one day, and a wildcard *.w.bench.test. for cache misses), the query
#     files, and a FEED_DOMAINS-domain feed (`svc-pf feed build … csv:-:FILE`,
#     category 1; FEED_HIT_SHARE % of the hit names are in it, so svc-pf
#     blocks those: NXDOMAIN in its rcodes column);
#  4. enters a network namespace of its own (unshare -n; BENCH_NETNS=0 runs
#     in the machine's): only loopback exists, so no server can reach
#     anything else and nothing collides with a system resolver. Every
#     server is on its own 127.53.0.x address and port (bench/resolver/lib.sh);
#  5. starts nsd, unbound, pdns-recursor ×2 and, for svc-pf, the sessions
#     hook (bench/resolver/sessions.sh: `svc-pf all` as control plane, 1 000
#     000 sessions and their settings over the orgmanager's REST API) and
#     `svc-pf resolver` following that NATS, with the feed; waits until
#     svc-pf's read model holds every session and the feed (/health);
#  6. for each round, each phase, each server in turn:
#       hit-1c    cache hits: dnsperf -T 1 -c 1 -q 100 over the hit names
#                 (warmed first), from 127.16.0.1: subscriber 1, whose
#                 settings block category 1 (so do hit-16c's and miss's)
#       hit-16c   cache hits: dnsperf -T 1 -c 16 -q 100
#       hit-subs  as hit-16c, but every query comes from another of the
#                 SESSIONS subscriber addresses (nftables rewrites dnsperf's
#                 source, bench/resolver/lib.sh subs_on; needs nft); with
#                 SUBS_ACTIVE=N, only from the first N subscribers
#       miss      cache misses: dnsperf -T 1 -c 16 -q 100 -n 1 over
#                 MISS_NAMES names nobody asked before (a fresh random tag
#                 per round; the wildcard answers), each asked once
#     each run DURATION seconds (a miss run ends earlier if its names run
#     out), then a latency run: LAT_SECONDS at a fixed LAT_QPS (misses:
#     LAT_QPS_MISS, fresh names) with dnsperf -v, whose per-query latencies
#     give the percentiles. The throughput runs have no -v (writing every
#     answer costs dnsperf, on the same 2 cores, about 20 % of its rate);
#  7. prints one markdown table: qps, CPU µs per answered query (utime +
#     stime of the server's process and its threads and children, from
#     /proc/PID/stat, before and after the run), the cores it used, lost
#     queries, dnsperf's mean latency at full load, p50/p90/p99/p99.9 of
#     the fixed-rate run, nsd's CPU per query, the response codes; then
#     the goals, as ratios, for each round.
#
# Usage: bench/resolver.sh
#   env: DURATION=20 ROUNDS=1 LAT_SECONDS=5 LAT_QPS=20000 LAT_QPS_MISS=5000
#        SERVERS="svcpf pdns pdns-tuned unbound"   which, in that order
#                            (also: svcpf-base, see SVCPF_BASE_BIN)
#        PHASES="hit-1c hit-16c hit-subs miss"
#        HIT_NAMES=1000 MISS_NAMES=1500000
#        SESSIONS=1000000 SETTINGS_USERS=1000 FEED_DOMAINS=1000000 FEED_HIT_SHARE=10
#        SUBS_ACTIVE=SESSIONS  hit-subs draws its sources among this many subscribers
#        SVCPF=0             peers only (no build)
#        SVCPF_BIN=PATH      use this svc-pf binary instead of building one
#        SVCPF_BASE_BIN=PATH with svcpf-base in SERVERS (after svcpf), a second
#                            svc-pf resolver from this binary (another build,
#                            to compare against) on 127.53.0.6:5305, same
#                            sessions, settings and feed; the goals then also
#                            print svcpf ÷ svcpf-base per phase
#        svcpf-noact in SERVERS (after svcpf): svcpf's binary again with
#                            activity.enabled: false, on 127.53.0.7:5306,
#                            same sessions, settings and feed; svcpf keeps
#                            activity on (the default) and publishes it to
#                            the control plane's NATS; the goals then also
#                            print svcpf ÷ svcpf-noact per phase (what
#                            activity costs; docs/performance.md, Activity)
#        SVCPF_UDP_SOCKETS=N, SVCPF_BASE_UDP_SOCKETS=N   dns.udp_sockets of
#                            svcpf / svcpf-base (unset: the resolver's default)
#        SVCPF_CMD='…'       run the resolver with this command line instead
#                            (bash -c; $SVCPF_CONFIG is the generated
#                            resolver.yaml, which listens on 127.53.0.5:5304)
#        SVCPF_SESSIONS_HOOK=PATH|none   what loads the sessions (see
#                            bench/resolver/sessions.sh for the contract)
#        BENCH_NETNS=0       do not enter a network namespace
#        KEEP=1              keep the work directory (its path is printed)
# Needs: root (apt-get, the namespace, nftables), go (for svc-pf).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
# shellcheck source-path=SCRIPTDIR source=resolver/lib.sh
. "$here/resolver/lib.sh"

DURATION=${DURATION:-20}
ROUNDS=${ROUNDS:-1}
LAT_SECONDS=${LAT_SECONDS:-5}
LAT_QPS=${LAT_QPS:-20000}
LAT_QPS_MISS=${LAT_QPS_MISS:-5000}
SERVERS=${SERVERS:-svcpf pdns pdns-tuned unbound}
PHASES=${PHASES:-hit-1c hit-16c hit-subs miss}
HIT_NAMES=${HIT_NAMES:-1000}
MISS_NAMES=${MISS_NAMES:-1500000}
SESSIONS=${SESSIONS:-1000000}
SETTINGS_USERS=${SETTINGS_USERS:-1000}
FEED_DOMAINS=${FEED_DOMAINS:-1000000}
FEED_HIT_SHARE=${FEED_HIT_SHARE:-10}
export DURATION ROUNDS LAT_SECONDS LAT_QPS LAT_QPS_MISS SERVERS PHASES HIT_NAMES MISS_NAMES \
	SESSIONS SETTINGS_USERS FEED_DOMAINS FEED_HIT_SHARE

declare -A PHASE_OPTS=(
	[hit-1c]="-T 1 -c 1 -q 100"
	[hit-16c]="-T 1 -c 16 -q 100"
	[hit-subs]="-T 1 -c 16 -q 100"
	[miss]="-T 1 -c 16 -q 100"
)

# ------------------------------------------------ outside: set up, then
# enter the namespace
outside() {
	[ "$(id -u)" = 0 ] || { log "run as root (apt-get, unshare -n, nft)"; exit 1; }
	[ "$SESSIONS" -le 1048576 ] || { log "SESSIONS ≤ 1048576 (subscribers are 127.16.0.0/12)"; exit 1; }
	SUBS_ACTIVE=${SUBS_ACTIVE:-$SESSIONS}
	export SUBS_ACTIVE
	install_packages
	WORK=$(mktemp -d /tmp/svcpf-bench-resolver.XXXXXX)
	export WORK
	trap 'stop_all; if [ "${KEEP:-}" = 1 ]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi' EXIT

	with_svcpf=0
	if [ "${SVCPF:-1}" != 0 ] && [[ " $SERVERS " == *" svcpf "* ]]; then
		if [ -z "${SVCPF_BIN:-}" ]; then
			log "== building svc-pf (go build ./cmd/svc-pf)"
			if (cd "$repo" && go build -o "$WORK/svc-pf" ./cmd/svc-pf); then
				SVCPF_BIN=$WORK/svc-pf
			else
				echo "svc-pf does not build: benchmarking the peers only"
			fi
		fi
		if [ -z "${SVCPF_BIN:-}" ]; then
			:
		elif [ -n "${SVCPF_CMD:-}" ] || "$SVCPF_BIN" help 2>&1 | grep -qE '^ +resolver '; then
			with_svcpf=1
		else
			echo "svc-pf resolver not available in this build: benchmarking the peers only"
		fi
	fi
	if [[ " $SERVERS " == *" svcpf-base "* ]]; then
		if [ $with_svcpf = 0 ] || [ -z "${SVCPF_BASE_BIN:-}" ]; then
			log "svcpf-base needs svcpf in SERVERS and SVCPF_BASE_BIN: not measured"
			SERVERS=$(for s in $SERVERS; do if [ "$s" != svcpf-base ]; then printf '%s ' "$s"; fi; done)
			SERVERS=${SERVERS% }
		fi
	fi
	if [ $with_svcpf = 0 ]; then
		SERVERS=$(for s in $SERVERS; do if [ "$s" != svcpf ] && [ "$s" != svcpf-noact ]; then printf '%s ' "$s"; fi; done)
		SERVERS=${SERVERS% }
	fi
	export SERVERS SVCPF_BIN SVCPF_BASE_BIN with_svcpf

	log "== generating: zone of $HIT_NAMES names (+ wildcard), hit queries$([ $with_svcpf = 1 ] && echo ", a feed of $FEED_DOMAINS domains")"
	gen_zone "$WORK/bench.test.zone" "$HIT_NAMES"
	gen_hits "$WORK/hits.txt" "$HIT_NAMES"
	if [ $with_svcpf = 1 ]; then
		gen_feed_csv "$WORK/feed.csv" "$FEED_DOMAINS" "$HIT_NAMES" "$FEED_HIT_SHARE"
		"$SVCPF_BIN" feed build --dir "$WORK/feed" --name bench --title 1=bench-blocked csv:-:"$WORK/feed.csv" | sed 's/^/   /' >&2
		rm -f "$WORK/feed.csv"
	fi

	if [ "${BENCH_NETNS:-1}" = 1 ]; then
		unshare -n -- bash "$0" __inside
	else
		inside
	fi
}

install_packages() {
	local want=() p
	command -v dnsperf > /dev/null || want+=(dnsperf)
	command -v pdns_recursor > /dev/null || want+=(pdns-recursor)
	command -v unbound > /dev/null || want+=(unbound)
	command -v nsd > /dev/null || want+=(nsd)
	command -v kdig > /dev/null || want+=(knot-dnsutils)
	command -v nft > /dev/null || want+=(nftables)
	command -v python3 > /dev/null || want+=(python3)
	command -v curl > /dev/null || want+=(curl)
	if [ ${#want[@]} -gt 0 ]; then
		log "== apt-get install ${want[*]}"
		# keep the packages' services from starting on install
		local rcd=/usr/sbin/policy-rc.d made=0
		if [ ! -e $rcd ]; then printf '#!/bin/sh\nexit 101\n' > $rcd && chmod +x $rcd && made=1; fi
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" > /dev/null
		if [ $made = 1 ]; then rm -f $rcd; fi
	fi
	# where systemd runs, the packages' own services may be up: stop them
	if [ -d /run/systemd/system ]; then
		for p in unbound pdns-recursor nsd; do systemctl disable --now "$p" > /dev/null 2>&1 || true; done
	fi
}

# ------------------------------------------------ inside the namespace
inside() {
	if [ "${BENCH_NETNS:-1}" = 1 ]; then
		ip link set lo up
		trap 'stop_all' EXIT
	fi
	# `declare -A` arrays are not exported: the inside half starts afresh
	local s tck
	tck=$(getconf CLK_TCK)

	echo "== $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "   DURATION=$DURATION ROUNDS=$ROUNDS LAT_SECONDS=$LAT_SECONDS LAT_QPS=$LAT_QPS LAT_QPS_MISS=$LAT_QPS_MISS HIT_NAMES=$HIT_NAMES MISS_NAMES=$MISS_NAMES"
	echo "   SERVERS=\"$SERVERS\" PHASES=\"$PHASES\"$([[ " $SERVERS " == *" svcpf "* ]] && echo " SESSIONS=$SESSIONS SETTINGS_USERS=$SETTINGS_USERS FEED_DOMAINS=$FEED_DOMAINS FEED_HIT_SHARE=$FEED_HIT_SHARE SUBS_ACTIVE=${SUBS_ACTIVE:-$SESSIONS}")"
	start_nsd
	for s in $SERVERS; do
		case $s in
		unbound) start_unbound ;;
		pdns | pdns-tuned) start_pdns "$s" ;;
		svcpf | svcpf-base | svcpf-noact) ;;
		*) log "unknown server $s"; exit 1 ;;
		esac
	done
	if [[ " $SERVERS " == *" svcpf "* ]]; then
		local nats=""
		local hook=${SVCPF_SESSIONS_HOOK:-$here/resolver/sessions.sh}
		if [ "$hook" != none ]; then
			echo "== sessions hook: $hook ($SESSIONS sessions, $SETTINGS_USERS user settings)"
			[ -n "$SVCPF_BIN" ] || { log "the default sessions hook needs SVCPF_BIN (svc-pf all)"; exit 1; }
			WORK=$WORK SVCPF_BIN=$SVCPF_BIN SESSIONS=$SESSIONS SETTINGS_USERS=$SETTINGS_USERS \
				CP_HOST=$CP_HOST AUTH=$AUTH bash "$hook"
			nats=$(cat "$WORK/nats.url")
		fi
		local name
		for name in svcpf svcpf-base svcpf-noact; do
			if [[ " $SERVERS " != *" $name "* ]]; then continue; fi
			local t0=$SECONDS
			start_svcpf "$nats" "$name"
			wait_dns "$name" 120 || { log "$name resolver did not answer:"; tail -n 30 "$WORK/$name.log" >&2; exit 1; }
			# ready: the feed loaded (/health) and, with NATS, every session
			while :; do
				local got=0
				[ -n "$nats" ] && got=$(svcpf_sessions "$name")
				if curl -sf "http://${HTTP[$name]}/health" > /dev/null && { [ -z "$nats" ] || [ "$got" -ge "$SESSIONS" ]; }; then break; fi
				[ $((SECONDS - t0)) -lt 600 ] || { log "$name not ready after 600 s (sessions $got)"; exit 1; }
				kill -0 "${PID[$name]}" 2> /dev/null || { tail -n 30 "$WORK/$name.log" >&2; exit 1; }
				sleep 1
			done
			echo "   $name resolver ready in $((SECONDS - t0)) s: sessions $([ -n "$nats" ] && svcpf_sessions "$name" || echo "none (no NATS)"), feed loaded, RSS $(awk '/VmRSS/ { printf "%d MB", $2 / 1024 }' "/proc/${PID[$name]}/status")"
		done
	fi
	for s in $SERVERS; do
		if [ "$s" = svcpf ] || [ "$s" = svcpf-base ] || [ "$s" = svcpf-noact ]; then continue; fi
		wait_dns "$s" 30 || { log "$s did not answer"; tail -n 20 "$WORK/$s/"*.log >&2; exit 1; }
	done
	for s in $SERVERS; do echo "   $s: $(version_of "$s") on ${ADDR[$s]}, pid ${PID[$s]}"; done
	echo "   nsd $(nsd -v 2>&1 | sed -n 's/^NSD version //p') on $AUTH; $(dnsperf -h 2>&1 | grep -o 'Version .*' | sed 's/Version/dnsperf/')"

	local has_nft=1
	if [[ " $PHASES " == *" hit-subs "* ]] && ! nft list tables > /dev/null 2>&1; then
		has_nft=0
		echo "   nft does not work here: the hit-subs phase is skipped"
	fi

	: > "$WORK/results.tsv"
	local round phase salt
	for round in $(seq 1 "$ROUNDS"); do
		for phase in $PHASES; do
			if [ "$phase" = hit-subs ] && [ $has_nft = 0 ]; then continue; fi
			[ -n "${PHASE_OPTS[$phase]:-}" ] || { log "unknown phase $phase"; exit 1; }
			if [ "$phase" = miss ]; then
				salt=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
				gen_misses "$WORK/miss.txt" "$MISS_NAMES" "m$salt"
				gen_misses "$WORK/miss-lat.txt" $((LAT_QPS_MISS * LAT_SECONDS * 5 / 4 + 1000)) "l$salt"
			fi
			if [ "$phase" = hit-subs ]; then subs_on; fi
			for s in $SERVERS; do
				measure "$round" "$phase" "$s" "$tck"
			done
			if [ "$phase" = hit-subs ]; then subs_off; fi
		done
	done
	echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	report
}

# measure ROUND PHASE SERVER TCK — one throughput run and one latency run;
# a row of results.tsv.
measure() {
	local round=$1 phase=$2 s=$3 tck=$4
	local a=${ADDR[$s]} src=() file opts lat_qps lat_file n=()
	opts=${PHASE_OPTS[$phase]}
	case $phase in
	miss) file=$WORK/miss.txt; n=(-n 1); lat_qps=$LAT_QPS_MISS; lat_file=$WORK/miss-lat.txt ;;
	*) file=$WORK/hits.txt; lat_qps=$LAT_QPS; lat_file=$WORK/hits.txt ;;
	esac
	if [ "$phase" = hit-subs ]; then src=(-a "$SUBS_SRC"); else src=(-a "$SUBS_ONE"); fi
	local perf=(dnsperf -s "${a%:*}" -p "${a#*:}" "${src[@]}")
	if [ "$phase" != miss ]; then # warm: every hit name twice
		"${perf[@]}" -d "$file" -T 1 -c 1 -q 100 -n 2 -l 30 > /dev/null 2>&1 || true
	fi
	sleep 1
	local c0 c1 a0 a1 l0
	l0=$(cut -d' ' -f1 /proc/loadavg)
	c0=$(cpu_ticks "${PID[$s]}")
	a0=$(cpu_ticks "$NSD_PID")
	# shellcheck disable=SC2086
	"${perf[@]}" -d "$file" $opts "${n[@]}" -l "$DURATION" > "$WORK/run.out" 2>&1 || true
	c1=$(cpu_ticks "${PID[$s]}")
	a1=$(cpu_ticks "$NSD_PID")
	local st
	st=$(dnsperf_stats "$WORK/run.out")
	# shellcheck disable=SC2086
	set -- $st # completed lost qps avg_ms runtime rcodes
	local completed=$1 lost=$2 qps=$3 avg=$4 rt=$5 rc=$6
	local cpu_us cores nsd_us
	cpu_us=$(awk -v d=$((c1 - c0)) -v t="$tck" -v q="$completed" 'BEGIN { printf "%.2f", (q > 0 ? d / t * 1e6 / q : 0) }')
	cores=$(awk -v d=$((c1 - c0)) -v t="$tck" -v r="$rt" 'BEGIN { printf "%.2f", (r > 0 ? d / t / r : 0) }')
	nsd_us=$(awk -v d=$((a1 - a0)) -v t="$tck" -v q="$completed" 'BEGIN { printf "%.2f", (q > 0 ? d / t * 1e6 / q : 0) }')
	# latency: a fixed rate, every answer's latency
	sleep 1
	# shellcheck disable=SC2086
	"${perf[@]}" -d "$lat_file" $opts "${n[@]}" -Q "$lat_qps" -l "$LAT_SECONDS" -v > "$WORK/lat.out" 2>&1 || true
	local pct
	pct=$(percentiles "$WORK/lat.out")
	# shellcheck disable=SC2086
	set -- $pct # p50 p90 p99 p99.9
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
		"$round" "$phase" "$s" "$qps" "$cpu_us" "$cores" "$lost" "$avg" "$1" "$2" "$3" "$4" "$nsd_us" "$rc" "$l0" >> "$WORK/results.tsv"
	printf '   %-8s %-10s %-10s %8s qps %7s µs/q  (%s cores, lost %s, %s s; load %s)\n' \
		"r$round" "$phase" "$s" "$qps" "$cpu_us" "$cores" "$lost" "$rt" "$l0" >&2
}

# report — the table and the goals, from results.tsv
report() {
	echo
	echo "dnsperf for ${DURATION} s a run; p50…p99.9 from a ${LAT_SECONDS} s run at ${LAT_QPS} qps (misses: ${LAT_QPS_MISS} qps)"
	echo
	echo "| round | phase | server | qps | CPU µs/query | cores | lost | mean ms (full load) | p50 ms | p90 ms | p99 ms | p99.9 ms | nsd µs/query | rcodes | load |"
	echo "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|"
	awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, rcodes($14), $15 }
		function rcodes(s) { gsub(/:/, " ", s); gsub(/,/, ", ", s); return s }' "$WORK/results.tsv"
	echo
	awk -F'\t' '
		{ k = $1 SUBSEP $2; q[k, $3] = $4; c[k, $3] = $5; phases[k] = 1 }
		END {
			for (k in phases) {
				split(k, kk, SUBSEP); r = kk[1]; p = kk[2]
				if (!((k, "svcpf") in q)) continue
				bq = 0; bc = 1e18; bqn = bcn = ""
				n = split("pdns pdns-tuned unbound", peers, " ")
				for (i = 1; i <= n; i++) { s = peers[i]; if (!((k, s) in q)) continue
					if (q[k, s] > bq) { bq = q[k, s]; bqn = s }
					if (c[k, s] < bc) { bc = c[k, s]; bcn = s } }
				if ((k, "svcpf-base") in q && q[k, "svcpf-base"] > 0 && c[k, "svcpf-base"] > 0)
					printf "round %s %-8s svcpf vs svcpf-base: qps %.0f vs %.0f: %.2f×; CPU/query %.2f vs %.2f µs: %.2f×\n", r, p, q[k, "svcpf"], q[k, "svcpf-base"], q[k, "svcpf"] / q[k, "svcpf-base"], c[k, "svcpf"], c[k, "svcpf-base"], c[k, "svcpf"] / c[k, "svcpf-base"]
				if ((k, "svcpf-noact") in q && q[k, "svcpf-noact"] > 0 && c[k, "svcpf-noact"] > 0)
					printf "round %s %-8s activity on vs off (svcpf vs svcpf-noact): qps %.0f vs %.0f: %.3f×; CPU/query %.2f vs %.2f µs: %+.2f µs (%.3f×)\n", r, p, q[k, "svcpf"], q[k, "svcpf-noact"], q[k, "svcpf"] / q[k, "svcpf-noact"], c[k, "svcpf"], c[k, "svcpf-noact"], c[k, "svcpf"] - c[k, "svcpf-noact"], c[k, "svcpf"] / c[k, "svcpf-noact"]
				if (bqn == "") continue
				if (p == "miss") {
					if ((k, "unbound") in c)
						printf "round %s %-8s CPU/query %.2f µs vs unbound %.2f µs: %.2f× (goal ≤ 1.00) %s\n", r, p, c[k, "svcpf"], c[k, "unbound"], c[k, "svcpf"] / c[k, "unbound"], (c[k, "svcpf"] <= c[k, "unbound"] ? "MET" : "MISSED")
				} else {
					printf "round %s %-8s qps %.0f vs best peer %s %.0f: %.2f× (goal ≥ 1.10) %s; CPU/query %.2f µs vs best peer %s %.2f µs: %.2f× (goal ≤ 1.00) %s\n", r, p, q[k, "svcpf"], bqn, bq, q[k, "svcpf"] / bq, (q[k, "svcpf"] >= 1.1 * bq ? "MET" : "MISSED"), c[k, "svcpf"], bcn, bc, c[k, "svcpf"] / bc, (c[k, "svcpf"] <= bc ? "MET" : "MISSED")
				}
			}
		}' "$WORK/results.tsv" | sort
}

trap 'exit 130' INT TERM
# one compound command and exit: bash reads a script as it runs it, so an
# edit of this file during a run must not be read half-way
if [ "${1:-}" = __inside ]; then inside; else outside; fi; exit
