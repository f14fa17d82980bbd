#!/usr/bin/env bash
# Encrypted DNS: cache hits over UDP, DoT and DoH against `svc-pf
# resolver` and unbound (Debian's package: DoT on tls-port, DoH on
# https-port, built with libnghttp2), with dnsperf (UDP, DoT) and h2load
# (DoH, HTTP/2; nghttp2-client), one
# local authoritative server (nsd) behind both, then 10 000 idle DoT
# connections held by svc-pf and its resident memory. Everything runs in a
# network namespace of its own, as bench/resolver.sh does (same helpers:
# bench/resolver/lib.sh), under `flock /tmp/svcpf-bench.lock`. Absolute
# figures on this shared 2-core machine swing by ±30 % between runs:
# compare within a run.
#
# Goals, as ratios within one run (cache hits, one subscriber):
#   svc-pf DoT qps ≥ 0.40 × svc-pf UDP qps; svc-pf DoH qps ≥ 0.30 × svc-pf
#   UDP qps; svc-pf DoT qps ≥ unbound DoT qps; svc-pf DoH qps ≥ unbound
#   DoH qps;
#   idle: IDLE_CONNS (10 000) DoT connections, each with its handshake done
#   and one query answered, held open with svc-pf's VmRSS ≤ 1 GiB.
#
# What it does (everything in a temporary directory, removed at the end):
#  1. installs what is missing (apt-get: dnsperf nghttp2-client unbound nsd
#     knot-dnsutils openssl curl python3 nftables; Debian's services kept from
#     starting), builds svc-pf and bench/idletls;
#  2. makes a self-signed certificate (openssl, P-256) for
#     bench.svcpf.test and the servers' addresses, used by both servers;
#  3. starts nsd (the zone of bench/resolver.sh), unbound (UDP
#     127.53.0.2:5301, DoT :8531, DoH :4431; 2 threads) and, with the
#     default sessions hook (bench/resolver/sessions.sh: `svc-pf all` as
#     control plane, SESSIONS sessions), `svc-pf resolver` (UDP
#     127.53.0.5:5304, DoT :8534, DoH :4434);
#  4. for each server, each mode in MODES (udp dot doh): warms the cache
#     (every hit name twice), then, from 127.16.0.1 (subscriber 1), over
#     the hit names: udp and dot: dnsperf -m MODE -T 1 -c CLIENTS -q 100
#     -l DURATION; doh: h2load -c CLIENTS -m 100/CLIENTS -D DURATION over
#     GET /dns-query?dns=… URIs of the same names (the same 100 queries
#     outstanding over CLIENTS HTTP/2 connections). Not dnsperf -m doh:
#     dnsperf 2.10 keeps one DNS message per HTTP/2 session, and a TLS
#     read that carries the frames of several answers (a server that
#     writes the answers ready together at once: svc-pf, unbound)
#     loses all but one: 569 and 2 387 qps for svc-pf and unbound with
#     0.08 cores each, queries lost. MODES may name dnsperf-doh to run it
#     anyway. CPU per query from /proc/PID/stat, as bench/resolver.sh;
#  5. idle: svc-pf only, with dns.tls.idle_timeout 10m, dns.tcp.max_connections
#     IDLE_CONNS + 1000 (the default 1024 bounds each listener), ulimit -n
#     65536: bench/idletls opens IDLE_CONNS DoT connections, each from its own
#     address (127.18.0.0 + i: the per-client bound, 32, is not in the way),
#     asks one query on each, waits IDLE_SETTLE and reads VmRSS;
#  6. prints one markdown table and the goals.
#
# Usage: bench/encrypted.sh
#   env: DURATION=15 CLIENTS=16 MODES="udp dot doh" SERVERS="svcpf unbound"
#        IDLE_CONNS=10000 (0: no idle phase) IDLE_SETTLE=10s
#        HIT_NAMES=1000 SESSIONS=1000 SETTINGS_USERS=10
#        SVCPF_BIN=PATH      use this svc-pf binary instead of building one
#        KEEP=1              keep the work directory
# Needs: root (apt-get, the namespace), go.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
# shellcheck source-path=SCRIPTDIR source=resolver/lib.sh
. "$here/resolver/lib.sh"

DURATION=${DURATION:-15}
CLIENTS=${CLIENTS:-16}
MODES=${MODES:-udp dot doh}
SERVERS=${SERVERS:-svcpf unbound}
IDLE_CONNS=${IDLE_CONNS:-10000}
IDLE_SETTLE=${IDLE_SETTLE:-10s}
HIT_NAMES=${HIT_NAMES:-1000}
SESSIONS=${SESSIONS:-1000}
SETTINGS_USERS=${SETTINGS_USERS:-10}
export DURATION CLIENTS MODES SERVERS IDLE_CONNS IDLE_SETTLE HIT_NAMES SESSIONS SETTINGS_USERS

# the encrypted ports of each server (UDP is lib.sh's ADDR)
declare -A DOT=([unbound]=127.53.0.2:8531 [svcpf]=127.53.0.5:8534)
declare -A DOH=([unbound]=127.53.0.2:4431 [svcpf]=127.53.0.5:4434)

outside() {
	[ "$(id -u)" = 0 ] || { log "run as root (apt-get, unshare -n)"; exit 1; }
	install_packages
	WORK=$(mktemp -d /tmp/svcpf-bench-encrypted.XXXXXX)
	export WORK
	trap 'stop_all; if [ "${KEEP:-}" = 1 ]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi' EXIT
	if [ -z "${SVCPF_BIN:-}" ]; then
		log "== building svc-pf and bench/idletls"
		(cd "$repo" && go build -o "$WORK/svc-pf" ./cmd/svc-pf)
		SVCPF_BIN=$WORK/svc-pf
	fi
	(cd "$repo" && go build -o "$WORK/idletls" ./bench/idletls)
	export SVCPF_BIN
	gen_zone "$WORK/bench.test.zone" "$HIT_NAMES"
	gen_hits "$WORK/hits.txt" "$HIT_NAMES"
	gen_doh_paths "$WORK/hits.txt" > "$WORK/doh-paths.txt"
	# an empty feed: this benchmark measures the transports
	printf 'nobody.example,1\n' > "$WORK/feed.csv"
	"$SVCPF_BIN" feed build --dir "$WORK/feed" --name bench --title 1=bench-blocked csv:-:"$WORK/feed.csv" > /dev/null
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj /CN=bench.svcpf.test -addext "subjectAltName=DNS:bench.svcpf.test,IP:127.53.0.2,IP:127.53.0.5" \
		-keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2> /dev/null
	unshare -n -- bash "$0" __inside
}

install_packages() {
	local want=() p
	command -v dnsperf > /dev/null || want+=(dnsperf)
	command -v h2load > /dev/null || want+=(nghttp2-client)
	command -v unbound > /dev/null || want+=(unbound)
	command -v nsd > /dev/null || want+=(nsd)
	command -v kdig > /dev/null || want+=(knot-dnsutils)
	command -v openssl > /dev/null || want+=(openssl)
	command -v curl > /dev/null || want+=(curl)
	command -v python3 > /dev/null || want+=(python3)
	command -v nft > /dev/null || want+=(nftables)
	if [ ${#want[@]} -gt 0 ]; then
		log "== apt-get install ${want[*]}"
		local rcd=/usr/sbin/policy-rc.d made=0
		if [ ! -e $rcd ]; then printf '#!/bin/sh\nexit 101\n' > $rcd && chmod +x $rcd && made=1; fi
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" > /dev/null
		if [ $made = 1 ]; then rm -f $rcd; fi
	fi
	if [ -d /run/systemd/system ]; then
		for p in unbound nsd; do systemctl disable --now "$p" > /dev/null 2>&1 || true; done
	fi
}

# gen_doh_paths HITS — /dns-query?dns=<base64url> for each line (name
# type) of a dnsperf query file: message id 0 (RFC 8484), RD, no EDNS,
# as dnsperf sends them.
gen_doh_paths() {
	python3 - "$1" <<'PY'
import base64, struct, sys
types = {"A": 1, "AAAA": 28}
for line in open(sys.argv[1]):
    name, qtype = line.split()
    q = struct.pack(">HHHHHH", 0, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", types[qtype], 1)
    print("/dns-query?dns=" + base64.urlsafe_b64encode(q).decode().rstrip("="))
PY
}

# unbound: lib.sh's configuration, plus DoT and DoH on their own ports
# with the bench certificate, and enough TCP slots for the clients
# (its default is 10 per thread).
start_unbound_tls() {
	local d="$WORK/unbound" a=${ADDR[unbound]} t=${DOT[unbound]} h=${DOH[unbound]}
	mkdir -p "$d"
	cat > "$d/unbound.conf" <<EOF
server:
  interface: ${a%:*}@${a#*:}
  interface: ${t%:*}@${t#*:}
  interface: ${h%:*}@${h#*:}
  tls-port: ${t#*:}
  https-port: ${h#*:}
  tls-service-key: "$WORK/key.pem"
  tls-service-pem: "$WORK/cert.pem"
  incoming-num-tcp: 1000
  username: ""
  chroot: ""
  directory: "$d"
  pidfile: "$d/unbound.pid"
  use-syslog: no
  logfile: "$d/unbound.log"
  verbosity: 1
  num-threads: 2
  so-reuseport: yes
  do-ip6: no
  msg-cache-size: 256m
  rrset-cache-size: 512m
  do-not-query-localhost: no
  local-zone: "test." nodefault
  module-config: "iterator"
remote-control:
  control-enable: no
forward-zone:
  name: "."
  forward-addr: ${AUTH%:*}@${AUTH#*:}
EOF
	unbound-checkconf "$d/unbound.conf" > /dev/null
	unbound -d -c "$d/unbound.conf" 2>> "$d/unbound.log" &
	PID[unbound]=$!
	track "${PID[unbound]}"
}

# svc-pf: lib.sh's configuration plus dns.dot, dns.doh and dns.tls; the
# idle phase's bounds (a long idle timeout, room for IDLE_CONNS
# connections) apply throughout: the hit runs open CLIENTS connections.
start_svcpf_tls() {
	local nats=$1 a=${ADDR[svcpf]} conf=$WORK/resolver.yaml
	cat > "$conf" <<EOF
dns:
  listen: ["$a"]
  dot: ["${DOT[svcpf]}"]
  doh: ["${DOH[svcpf]}"]
  tcp:
    max_connections: $((IDLE_CONNS + 1000))
  tls:
    cert_file: "$WORK/cert.pem"
    key_file: "$WORK/key.pem"
    idle_timeout: 10m
forwarders: ["$AUTH"]
http:
  address: ${HTTP[svcpf]}
api:
  key: bench
allow_from: ["127.0.0.0/8"]
log:
  level: info
nats:
  url: "$nats"
feeds:
  - {name: bench, url: "$WORK/feed", poll_interval: 5s}
EOF
	"$SVCPF_BIN" resolver -c "$conf" > "$WORK/svcpf.log" 2>&1 &
	PID[svcpf]=$!
	track "${PID[svcpf]}"
}

inside() {
	ip link set lo up
	trap 'stop_all' EXIT
	# 65536 open files, or as many as the hard limit allows (the server
	# and idletls each hold IDLE_CONNS sockets)
	ulimit -n 65536 2> /dev/null || ulimit -n "$(ulimit -Hn)"
	local s m tck
	tck=$(getconf CLK_TCK)
	echo "== $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC'), ulimit -n $(ulimit -n)"
	echo "   DURATION=$DURATION CLIENTS=$CLIENTS MODES=\"$MODES\" SERVERS=\"$SERVERS\" IDLE_CONNS=$IDLE_CONNS HIT_NAMES=$HIT_NAMES SESSIONS=$SESSIONS"
	start_nsd
	if [[ " $SERVERS " == *" unbound "* ]]; then start_unbound_tls; fi
	if [[ " $SERVERS " == *" svcpf "* ]]; then
		WORK=$WORK SVCPF_BIN=$SVCPF_BIN SESSIONS=$SESSIONS SETTINGS_USERS=$SETTINGS_USERS \
			CP_HOST=$CP_HOST AUTH=$AUTH bash "$here/resolver/sessions.sh"
		start_svcpf_tls "$(cat "$WORK/nats.url")"
		wait_dns svcpf 120 || { log "svc-pf did not answer:"; tail -n 30 "$WORK/svcpf.log" >&2; exit 1; }
		local t0=$SECONDS
		until curl -sf "http://${HTTP[svcpf]}/health" > /dev/null && [ "$(svcpf_sessions)" -ge "$SESSIONS" ]; do
			[ $((SECONDS - t0)) -lt 300 ] || { log "svc-pf not ready"; exit 1; }
			sleep 1
		done
	fi
	for s in $SERVERS; do
		wait_dns "$s" 30 || { log "$s did not answer"; exit 1; }
		echo "   $s: $(version_of "$s"), pid ${PID[$s]}: UDP ${ADDR[$s]}, DoT ${DOT[$s]}, DoH ${DOH[$s]}"
	done
	echo "   $(dnsperf -h 2>&1 | grep -o 'Version .*' | sed 's/Version/dnsperf/')"

	: > "$WORK/results.tsv"
	for m in $MODES; do
		for s in $SERVERS; do measure "$s" "$m" "$tck"; done
	done
	local idle=""
	if [ "$IDLE_CONNS" -gt 0 ] && [[ " $SERVERS " == *" svcpf "* ]]; then
		# the load runs' connections are gone (dnsperf closed them)
		sleep 2
		echo "== idle: $IDLE_CONNS DoT connections to svc-pf ($WORK/idletls -addr ${DOT[svcpf]} -n $IDLE_CONNS -settle $IDLE_SETTLE)"
		idle=$("$WORK/idletls" -addr "${DOT[svcpf]}" -pid "${PID[svcpf]}" -n "$IDLE_CONNS" -src 127.18.0.0 \
			-q h0.bench.test -settle "$IDLE_SETTLE") || { log "idletls failed: $idle"; }
		echo "   $idle"
	fi
	echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	report "$idle"
}

# measure SERVER MODE TCK — one warm-up and one throughput run.
measure() {
	local s=$1 m=$2 tck=$3 a
	local perf=(dnsperf -a "$SUBS_ONE")
	case $m in
	udp) a=${ADDR[$s]}; perf+=(-m udp) ;;
	dot) a=${DOT[$s]}; perf+=(-m dot) ;;
	doh) a=${DOH[$s]} ;;
	dnsperf-doh) a=${DOH[$s]}; perf+=(-m doh -O doh-method=POST -O "doh-uri=https://${a}/dns-query") ;;
	*) log "unknown mode $m"; exit 1 ;;
	esac
	perf+=(-s "${a%:*}" -p "${a#*:}")
	if [ "$m" = doh ]; then
		sed "s|^|https://$a|" "$WORK/doh-paths.txt" > "$WORK/doh-uris.txt"
		# h2load has no source address option: subscriber 1's address
		# becomes loopback's preferred source (until the run ends)
		ip route replace local 127.0.0.0/8 dev lo proto kernel scope host src "$SUBS_ONE" table local
		h2load -c 1 -m 10 -n $((HIT_NAMES * 4)) -i "$WORK/doh-uris.txt" > /dev/null 2>&1 || true
	else
		"${perf[@]}" -d "$WORK/hits.txt" -T 1 -c 1 -q 100 -n 2 -l 30 > /dev/null 2>&1 || true
	fi
	sleep 1
	local c0 c1
	c0=$(cpu_ticks "${PID[$s]}")
	if [ "$m" = doh ]; then
		h2load -c "$CLIENTS" -m $((100 / CLIENTS > 0 ? 100 / CLIENTS : 1)) -D "$DURATION" -i "$WORK/doh-uris.txt" > "$WORK/run.out" 2>&1 || true
	else
		"${perf[@]}" -d "$WORK/hits.txt" -T 1 -c "$CLIENTS" -q 100 -l "$DURATION" > "$WORK/run.out" 2>&1 || true
	fi
	c1=$(cpu_ticks "${PID[$s]}")
	if [ "$m" = doh ]; then ip route replace local 127.0.0.0/8 dev lo proto kernel scope host src 127.0.0.1 table local; fi
	local st
	if [ "$m" = doh ]; then st=$(h2load_stats "$WORK/run.out"); else st=$(dnsperf_stats "$WORK/run.out"); fi
	# shellcheck disable=SC2086
	set -- $st # completed lost qps avg_ms runtime rcodes
	local completed=$1 lost=$2 qps=$3 avg=$4 rt=$5 rc=$6 cpu_us cores
	cpu_us=$(awk -v d=$((c1 - c0)) -v t="$tck" -v q="$completed" 'BEGIN { printf "%.2f", (q > 0 ? d / t * 1e6 / q : 0) }')
	cores=$(awk -v d=$((c1 - c0)) -v t="$tck" -v r="$rt" 'BEGIN { printf "%.2f", (r > 0 ? d / t / r : 0) }')
	if [ "$completed" = 0 ]; then tail -n 5 "$WORK/run.out" >&2; fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$m" "$qps" "$cpu_us" "$cores" "$lost" "$avg" "$rc" >> "$WORK/results.tsv"
	printf '   %-8s %-4s %8s qps %7s µs/q  (%s cores, lost %s, %s s)\n' "$s" "$m" "$qps" "$cpu_us" "$cores" "$lost" "$rt" >&2
}

# h2load_stats FILE — "completed lost qps avg_ms runtime rcodes" from
# h2load's summary, as dnsperf_stats (rcodes: the HTTP status classes;
# lost: failed, errored and timed-out requests).
h2load_stats() {
	awk '
		/^finished in/ { r = $3; sub(/s,$/, "", r); q = $4 }
		/^requests:/ { c = $8; l = $10 }
		/^status codes:/ { s = "2xx:" $3 ",4xx:" $7 ",5xx:" $9 }
		/^time for request:/ { a = $6; if (a ~ /us$/) { sub(/us$/, "", a); a /= 1000 } else if (a ~ /ms$/) sub(/ms$/, "", a); else if (a ~ /s$/) { sub(/s$/, "", a); a *= 1000 } }
		END { printf "%d %d %.0f %.3f %.2f %s\n", c, l, q, a, r, (s == "" ? "-" : s) }' "$1"
}

report() {
	echo
	echo "cache hits from subscriber 1 (127.16.0.1); udp, dot: dnsperf -T 1 -c $CLIENTS -q 100 -l $DURATION ; doh: h2load -c $CLIENTS -m $((100 / CLIENTS > 0 ? 100 / CLIENTS : 1)) -D $DURATION, GET, HTTP/2"
	echo
	echo "| server | transport | qps | CPU µs/query | cores | lost | mean ms | rcodes |"
	echo "|---|---|--:|--:|--:|--:|--:|---|"
	awk -F'\t' '{ r = $8; gsub(/:/, " ", r); gsub(/,/, ", ", r); printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, r }' "$WORK/results.tsv"
	echo
	awk -F'\t' '
		{ q[$1, $2] = $3 }
		function goal(what, a, b, want) {
			if (b <= 0 || a == "") return
			printf "%-34s %8.0f / %8.0f = %.2f (goal ≥ %.2f) %s\n", what, a, b, a / b, want, (a >= want * b ? "MET" : "MISSED")
		}
		END {
			if (("svcpf", "udp") in q) {
				if (("svcpf", "dot") in q) goal("svc-pf DoT ÷ svc-pf UDP", q["svcpf", "dot"], q["svcpf", "udp"], 0.40)
				if (("svcpf", "doh") in q) goal("svc-pf DoH ÷ svc-pf UDP", q["svcpf", "doh"], q["svcpf", "udp"], 0.30)
			}
			if (("svcpf", "dot") in q && ("unbound", "dot") in q) goal("svc-pf DoT ÷ unbound DoT", q["svcpf", "dot"], q["unbound", "dot"], 1.00)
			if (("svcpf", "doh") in q && ("unbound", "doh") in q) goal("svc-pf DoH ÷ unbound DoH", q["svcpf", "doh"], q["unbound", "doh"], 1.00)
			if (("svcpf", "udp") in q && ("unbound", "udp") in q) printf "%-34s %8.0f / %8.0f = %.2f (no goal here: bench/resolver.sh)\n", "svc-pf UDP ÷ unbound UDP", q["svcpf", "udp"], q["unbound", "udp"], q["svcpf", "udp"] / q["unbound", "udp"]
		}' "$WORK/results.tsv"
	if [ -n "$1" ]; then
		echo "$1" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
			END { printf "%-34s %s connections open (%s failed, %s closed by the server), VmRSS %s MB (%s MB before): %s (goal ≤ 1024 MB)\n", "idle DoT connections", v["connections"], v["failed"], v["closed_by_server"], v["rss_settled_mb"], v["rss_before_mb"], (v["rss_settled_mb"] <= 1024 && v["failed"] == 0 && v["closed_by_server"] == 0 ? "MET" : "MISSED") }'
	fi
}

trap 'exit 130' INT TERM
if [ "${1:-}" = __inside ]; then inside; else outside; fi; exit
