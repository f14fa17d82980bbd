# Functions of bench/resolver.sh (sourced; not run on its own): the
# authoritative zone, the servers' configurations, starting and stopping
# them, CPU accounting from /proc and the dnsperf runs.
#
# Addresses (all on 127.0.0.0/8, explicit non-53 ports; inside the
# script's own network namespace by default, so nothing can leave the
# machine and nothing collides with a system resolver on 127.0.0.1:53):
#   nsd (authoritative bench.test.)     127.53.0.1:5300
#   unbound                             127.53.0.2:5301
#   pdns-recursor, Debian defaults      127.53.0.3:5302
#   pdns-recursor, tuned                127.53.0.4:5303
#   svc-pf resolver                     127.53.0.5:5304 (API 127.53.0.5:8082)
#   svc-pf resolver, SVCPF_BASE_BIN     127.53.0.6:5305 (API 127.53.0.6:8082)
#   svc-pf resolver, activity off       127.53.0.7:5306 (API 127.53.0.7:8082)
#   control plane (svc-pf all)          127.53.0.9 (NATS :4223, orgmanager :8080)
#   dnsperf                             127.16.0.1 (subscriber 1), or 127.0.0.2
#                                       rewritten to a random subscriber's
#                                       address (hit-subs)
# shellcheck shell=bash disable=SC2034  # the variables are used by bench/resolver.sh

AUTH=127.53.0.1:5300
declare -A ADDR=(
	[unbound]=127.53.0.2:5301
	[pdns]=127.53.0.3:5302
	[pdns-tuned]=127.53.0.4:5303
	[svcpf]=127.53.0.5:5304
	[svcpf-base]=127.53.0.6:5305
	[svcpf-noact]=127.53.0.7:5306
)
declare -A HTTP=(
	[svcpf]=127.53.0.5:8082
	[svcpf-base]=127.53.0.6:8082
	[svcpf-noact]=127.53.0.7:8082
)
SVCPF_HTTP=${HTTP[svcpf]}
CP_HOST=127.53.0.9
# Subscriber addresses: 127.16.0.0 + i for session i (i < SESSIONS ≤ 2^20),
# one /32 each.
SUBS_BASE_INT=2131755008 # 127.16.0.0
SUBS_CIDR=127.16.0.0/12
SUBS_SRC=127.0.0.2
SUBS_ONE=127.16.0.1
declare -A PID=()

log() { echo "$*" >&2; }

# remember PID so that cleanup stops it
track() { echo "$1" >> "$WORK/pids"; }

stop_all() {
	[ -f "$WORK/pids" ] || return 0
	local p
	for p in $(tac "$WORK/pids"); do kill "$p" 2>/dev/null || true; done
	for _ in $(seq 1 50); do
		local alive=0
		for p in $(cat "$WORK/pids"); do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in $(cat "$WORK/pids"); do kill -9 "$p" 2>/dev/null || true; done
	: > "$WORK/pids"
}

# cpu_ticks PID… — utime+stime (clock ticks) of the processes and all their
# descendants; /proc/PID/stat counts every thread of a process, live or
# exited.
cpu_ticks() {
	# (a process may end between the glob and cat: cat's status is no error)
	{ cat /proc/[0-9]*/stat 2> /dev/null || true; } | awk -v roots="$*" '
		BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1 }
		{ pid = $1; line = $0; sub(/^.*\) /, "", line); split(line, f, " ")
		  ppid[pid] = f[2]; t[pid] = f[12] + f[13] }
		END {
			do { more = 0
				for (p in ppid) if (!(p in want) && (ppid[p] in want)) { want[p] = 1; more = 1 }
			} while (more)
			s = 0; for (p in want) if (p in t) s += t[p]; print s
		}'
}

# ---------------------------------------------------------------- data

# gen_zone FILE HITS — bench.test.: h0…h(HITS-1) with A and AAAA, and a
# wildcard under w.bench.test. for the cache-miss phase. TTL one day, far
# longer than any run.
gen_zone() {
	awk -v n="$2" 'BEGIN {
		print "$ORIGIN bench.test."
		print "$TTL 86400"
		print "@ IN SOA ns hostmaster 1 3600 600 86400 86400"
		print "@ IN NS ns"
		print "ns IN A 127.53.0.1"
		for (i = 0; i < n; i++)
			printf "h%d IN A 192.0.2.%d\nh%d IN AAAA 2001:db8::%x\n", i, i % 254 + 1, i, i + 1
		print "*.w IN A 192.0.2.250"
		print "*.w IN AAAA 2001:db8::fa"
	}' > "$1"
}

# gen_hits FILE HITS — every name of the zone, A then AAAA.
gen_hits() {
	awk -v n="$2" 'BEGIN { for (i = 0; i < n; i++) printf "h%d.bench.test A\nh%d.bench.test AAAA\n", i, i }' > "$1"
}

# gen_misses FILE COUNT TAG — COUNT names nobody has asked before (TAG
# holds a per-run random salt), answered by the wildcard.
gen_misses() {
	awk -v n="$2" -v tag="$3" 'BEGIN { for (i = 0; i < n; i++) printf "%s-%d.w.bench.test A\n", tag, i }' > "$1"
}

# gen_feed_csv FILE DOMAINS HITS SHARE — csv:-:FILE for `svc-pf feed
# build`: DOMAINS names in category 1, of which SHARE % of the hit names
# (h9, h19, …: never h0, the readiness probe), the rest synthetic names
# nobody queries.
gen_feed_csv() {
	awk -v n="$2" -v hits="$3" -v share="$4" 'BEGIN {
		k = 0
		if (share > 0) { step = int(100 / share); if (step < 1) step = 1
			for (i = step - 1; i < hits && k < n; i += step) { printf "h%d.bench.test,1\n", i; k++ } }
		for (i = 0; k < n; i++) { printf "d%d.f%d.example,1\n", i, i % 997; k++ }
	}' > "$1"
}

# ------------------------------------------------------------ servers

start_nsd() {
	local d="$WORK/nsd"
	mkdir -p "$d"
	cp "$WORK/bench.test.zone" "$d/"
	cat > "$d/nsd.conf" <<EOF
server:
  ip-address: ${AUTH%:*}@${AUTH#*:}
  do-ip6: no
  username: ""
  chroot: ""
  zonesdir: "$d"
  pidfile: "$d/nsd.pid"
  database: ""
  zonelistfile: "$d/zone.list"
  xfrdfile: "$d/xfrd.state"
  xfrdir: "$d"
  logfile: "$d/nsd.log"
  server-count: 1
  verbosity: 1
  # response rate limiting would throttle the cache-miss phase (every
  # answer comes from one wildcard)
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: bench.test
  zonefile: bench.test.zone
EOF
	nsd -d -c "$d/nsd.conf" 2>> "$d/nsd.log" &
	NSD_PID=$!
	track $NSD_PID
}

# unbound as Debian ships it, but: its own config (no trust anchor, no
# remote control), forward everything to nsd, 2 threads, SO_REUSEPORT,
# caches big enough that the cache-miss phase does not evict (pdns-recursor
# and svc-pf hold 1 000 000 records by default).
start_unbound() {
	local d="$WORK/unbound" a=${ADDR[unbound]}
	mkdir -p "$d"
	cat > "$d/unbound.conf" <<EOF
server:
  interface: ${a%:*}@${a#*:}
  port: ${a#*:}
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
  # the forwarder is on loopback; test. is one of unbound's built-in
  # local zones (RFC 6761)
  do-not-query-localhost: no
  local-zone: "test." nodefault
  # no validation: a loopback-only zone cannot be proven insecure, and
  # svc-pf forwards without validating
  module-config: "iterator"
remote-control:
  control-enable: no
forward-zone:
  name: "."
  forward-addr: ${AUTH%:*}@${AUTH#*:}
EOF
	unbound-checkconf "$d/unbound.conf" >/dev/null
	unbound -d -c "$d/unbound.conf" 2>> "$d/unbound.log" &
	PID[unbound]=$!
	track "${PID[unbound]}"
}

# pdns-recursor with Debian's defaults (threads=2, the distributor thread
# hands queries to the workers) or tuned (each worker reads its own
# SO_REUSEPORT socket). bench.test. and "." go to nsd (so nothing, not even
# the root priming, leaves loopback); no DNSSEC processing (as unbound);
# no security poll.
start_pdns() { # pdns | pdns-tuned
	local name=$1 d="$WORK/$1" a=${ADDR[$1]}
	mkdir -p "$d"
	cat > "$d/recursor.conf" <<EOF
local-address=${a%:*}
local-port=${a#*:}
threads=2
forward-zones=bench.test=$AUTH, .=$AUTH
dnssec=off
security-poll-suffix=
socket-dir=$d
daemon=no
write-pid=no
disable-syslog=yes
quiet=yes
loglevel=4
EOF
	if [ "$name" = pdns-tuned ]; then
		printf 'pdns-distributes-queries=no\nreuseport=yes\n' >> "$d/recursor.conf"
	fi
	pdns_recursor --config-dir="$d" > "$d/recursor.log" 2>&1 &
	PID[$name]=$!
	track "${PID[$name]}"
}

# svc-pf resolver: the resolver's documented config keys (docs/resolver.md), written to
# $WORK/NAME.yaml (resolver.yaml for svcpf); SVCPF_CMD (run with bash -c,
# SVCPF_CONFIG set to that file) replaces svcpf's command line. svcpf-base
# is the same resolver from SVCPF_BASE_BIN (a build to compare against), on
# its own address, following the same NATS and feed. svcpf-noact is
# svcpf's binary with activity.enabled: false (svcpf keeps activity on, the
# default, and publishes it to the same NATS), to measure what activity
# costs. SVCPF_UDP_SOCKETS and SVCPF_BASE_UDP_SOCKETS set dns.udp_sockets
# of svcpf (and svcpf-noact) and svcpf-base (unset: the default).
start_svcpf() { # NATS_URL (may be empty) [NAME: svcpf | svcpf-base | svcpf-noact]
	local nats=$1 name=${2:-svcpf}
	local a=${ADDR[$name]} conf=$WORK/resolver.yaml
	[ "$name" = svcpf ] || conf=$WORK/$name.yaml
	local socks=${SVCPF_UDP_SOCKETS:-}
	[ "$name" != svcpf-base ] || socks=${SVCPF_BASE_UDP_SOCKETS:-}
	cat > "$conf" <<EOF
dns:
  listen: ["$a"]
$([ -z "$socks" ] || echo "  udp_sockets: $socks")
forwarders: ["$AUTH"]
http:
  address: ${HTTP[$name]}
api:
  key: bench
allow_from: ["127.0.0.0/8"]
log:
  level: info
nats:
  url: "$nats"
feeds:
  - {name: bench, url: "$WORK/feed", poll_interval: 5s}
$([ "$name" != svcpf-noact ] || echo "activity: {enabled: false}")
EOF
	if [ "$name" = svcpf-base ]; then
		"$SVCPF_BASE_BIN" resolver -c "$conf" > "$WORK/$name.log" 2>&1 &
	elif [ "$name" = svcpf-noact ]; then
		"$SVCPF_BIN" resolver -c "$conf" > "$WORK/$name.log" 2>&1 &
	elif [ -n "${SVCPF_CMD:-}" ]; then
		SVCPF_CONFIG="$conf" bash -c "exec $SVCPF_CMD" > "$WORK/svcpf.log" 2>&1 &
	else
		"$SVCPF_BIN" resolver -c "$conf" > "$WORK/svcpf.log" 2>&1 &
	fi
	PID[$name]=$!
	track "${PID[$name]}"
}

# wait_dns NAME SECONDS — until the server answers h0.bench.test A.
wait_dns() {
	local a=${ADDR[$1]} end=$((SECONDS + $2))
	while [ $SECONDS -lt $end ]; do
		if [ -n "${PID[$1]:-}" ] && ! kill -0 "${PID[$1]}" 2>/dev/null; then
			return 1
		fi
		if kdig @"${a%:*}" -p "${a#*:}" h0.bench.test A +short +time=1 +retry=0 2>/dev/null | grep -q '^192\.0\.2\.'; then
			return 0
		fi
		sleep 0.2
	done
	return 1
}

# svcpf_sessions [NAME] — the sessions the resolver's read model holds
# (/metrics).
svcpf_sessions() {
	{ curl -sf "http://${HTTP[${1:-svcpf}]}/metrics" 2> /dev/null || true; } |
		awk '/^svcpf_readmodel_entries\{bucket="sessions"\}/ { print $2 + 0; f = 1 } END { if (!f) print 0 }'
}

version_of() {
	case $1 in
	unbound) unbound -V 2>/dev/null | sed -n 's/^Version /unbound /p' ;;
	pdns | pdns-tuned) pdns_recursor --version 2>&1 | grep -o 'PowerDNS Recursor [^ ]*' | head -n1 ;;
	svcpf) if [ -n "${SVCPF_CMD:-}" ]; then echo "SVCPF_CMD=$SVCPF_CMD"; else "$SVCPF_BIN" --version 2>/dev/null; fi ;;
	svcpf-base) echo "$("$SVCPF_BASE_BIN" --version 2>/dev/null) ($SVCPF_BASE_BIN)" ;;
	svcpf-noact) echo "$("$SVCPF_BIN" --version 2>/dev/null), activity.enabled: false" ;;
	esac
}

# ------------------------------------------------------- subscribers

# subs_on / subs_off: an nftables table that rewrites every query dnsperf
# sends from 127.0.0.2 to one of the SUBS_ACTIVE (default SESSIONS)
# subscriber addresses (127.16.0.0 + random < SUBS_ACTIVE, a new one for
# each packet), and the
# answer back to 127.0.0.2. dnsperf has one source address; this gives the
# servers a million. Stateless (no conntrack); the rule costs the same for
# every server.
subs_on() {
	local ports
	ports=$(for s in "${!ADDR[@]}"; do printf '%s, ' "${ADDR[$s]#*:}"; done)
	nft -f - <<EOF
table ip svcpf_bench_subs {
	chain out {
		type filter hook output priority raw; policy accept;
		ip saddr $SUBS_SRC udp dport { ${ports%, } } ip saddr set numgen random mod ${SUBS_ACTIVE:-$SESSIONS} offset $SUBS_BASE_INT
		ip daddr $SUBS_CIDR udp sport { ${ports%, } } ip daddr set $SUBS_SRC
	}
}
EOF
}
subs_off() { nft delete table ip svcpf_bench_subs 2>/dev/null || true; }

# ------------------------------------------------------------ dnsperf

# dnsperf_stats FILE — "completed lost qps avg_ms runtime rcodes" from
# dnsperf's summary.
dnsperf_stats() {
	awk '
		/Queries completed:/ { c = $3 }
		/Queries lost:/ { l = $3 }
		/Queries per second:/ { q = $4 }
		/Average Latency \(s\):/ { a = $4 * 1000 }
		/Run time \(s\):/ { r = $4 }
		/Response codes:/ { line = $0; sub(/^.*Response codes: */, "", line); n = split(line, part, /, /)
			for (i = 1; i <= n; i++) { split(part[i], w, " "); gsub(/[()]/, "", w[3]); rc = rc (i > 1 ? "," : "") w[1] ":" w[3] } }
		END { printf "%d %d %.0f %.3f %.2f %s\n", c, l, q, a, r, (rc == "" ? "-" : rc) }' "$1"
}

# percentiles FILE — "p50 p90 p99 p99.9" in ms from dnsperf -v lines
# ("> RCODE name type latency").
percentiles() {
	awk '/^> / && $NF ~ /^[0-9.]+$/ { print $NF * 1000 }' "$1" | sort -g | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "- - - -"; exit }
			split("0.50 0.90 0.99 0.999", p, " ")
			for (i = 1; i <= 4; i++) { k = int(p[i] * NR + 0.999999); if (k < 1) k = 1; if (k > NR) k = NR
				printf "%.3f%s", v[k], (i < 4 ? " " : "\n") }
		}'
}
