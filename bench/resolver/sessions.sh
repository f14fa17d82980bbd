#!/usr/bin/env bash
# ====================================================================
# HOOK: sessions and settings for the svc-pf resolver under test.
# ====================================================================
# bench/resolver.sh runs this (or the command in SVCPF_SESSIONS_HOOK)
# inside its network namespace, before it starts `svc-pf resolver`. The
# contract:
#   in (environment): WORK (the harness's work directory), SVCPF_BIN (the
#     built svc-pf), SESSIONS (how many), SETTINGS_USERS, CP_HOST (a
#     loopback address for the control plane), AUTH (nsd's ip:port).
#     Subscriber i has the address 127.16.0.0 + i (one /32; the hit-subs
#     phase sends from random addresses among the first SESSIONS).
#   out: $WORK/nats.url holds the NATS URL the resolver follows (its
#     `nats.url`), whose `sessions` and `settings` buckets hold the
#     sessions and settings below; every process started is appended to
#     $WORK/pids (the harness stops them). Exit 0 once the control plane's
#     own node holds SESSIONS sessions.
#
# This default goes the production way, over public APIs only: `svc-pf
# all` (embedded NATS, orgmanager, IP Mapper) as the control plane, and
# the orgmanager's REST API:
#   - organisation bench-K owns the /18 127.16.0.0 + K·16384 (64 of them
#     cover 127.16.0.0/12), with one /32 override per subscriber i, username
#     "u<i>" (so one session each), in batches of at most 10 000;
#   - org settings of every organisation: {"blocked_categories":[1]} (the
#     feed's category: filtering is on for everybody);
#   - SETTINGS_USERS subscribers, spread evenly, get their own username
#     layer {"blocked_categories":[1,2]}: a second policy class.
# The control plane keeps running during the benchmark (the resolver's NATS
# server); idle, it uses little CPU, and the harness does not count it. It
# runs with GOGC=off and a GOMEMLIMIT (CP_GOGC, CP_GOMEMLIMIT: 6GiB): with
# the runtime's defaults its heap of a million sessions (0.7–1.2 GB live)
# was marked every two minutes by the forced collection, 1.3–1.9 s of CPU
# in one burst on the 2 cores the measured server shares, landing in the
# phases at random; with a memory limit instead, an idle control plane
# does not collect at all.
#
# The lead may replace this: SVCPF_SESSIONS_HOOK=/path/to/script, or
# SVCPF_SESSIONS_HOOK=none for a resolver without NATS (no sessions, no
# settings: every client gets the empty global layer, nothing is blocked).
set -euo pipefail
: "${WORK:?}" "${SVCPF_BIN:?}" "${SESSIONS:?}" "${CP_HOST:?}" "${AUTH:?}"
users=${SETTINGS_USERS:-1000}
cp=$WORK/controlplane
mkdir -p "$cp"
cat > "$cp/all.yaml" <<EOF
data_dir: $cp/data
log: {level: warn}
nats: {listen: "$CP_HOST:4223"}
orgmanager: {http: {address: "$CP_HOST:8080"}}
ipmapper: {http: {address: "$CP_HOST:8083"}}
node: {http: {address: "$CP_HOST:8082"}}
simulator: {http: {address: "$CP_HOST:8081"}}
resolver:
  dns: {listen: ["$CP_HOST:5353"]}
  forwarders: ["$AUTH"]
EOF
GOGC=${CP_GOGC:-off} GOMEMLIMIT=${CP_GOMEMLIMIT:-6GiB} "$SVCPF_BIN" all -c "$cp/all.yaml" > "$cp/all.log" 2>&1 &
pid=$!
echo $pid >> "$WORK/pids"
for _ in $(seq 1 300); do
	curl -sf "http://$CP_HOST:8080/health" > /dev/null && break
	kill -0 $pid 2> /dev/null || { cat "$cp/all.log" >&2; exit 1; }
	sleep 0.2
done
# The first start wrote the admin token there (docs/access.md).
export SVCPF_BENCH_TOKEN
SVCPF_BENCH_TOKEN=$(cat "$cp/data/admin.token")

t0=$SECONDS
python3 - "http://$CP_HOST:8080" "$SESSIONS" "$users" <<'PY'
import json, os, sys, urllib.request
base, n, users = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_org = 16384

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + os.environ["SVCPF_BENCH_TOKEN"])
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read()

def ip(i):
    a = 0x7F100000 + i
    return "%d.%d.%d.%d" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255)

orgs = (n + per_org - 1) // per_org
for k in range(orgs):
    org = "bench-%d" % k
    call("PUT", "/org/" + org)
    call("PATCH", "/org/%s/prefixes" % org, {"add": ["%s/18" % ip(k * per_org)]})
    call("PUT", "/org/%s/settings" % org, {"blocked_categories": [1]})
    first, last = k * per_org, min(n, (k + 1) * per_org)
    for s in range(first, last, 10000):
        items = [{"cidr": ip(i) + "/32", "username": "u%d" % i} for i in range(s, min(last, s + 10000))]
        out = json.loads(call("POST", "/org/%s/overrides/batch" % org, {"data": items}))
        if out.get("errors"):
            sys.exit("batch errors: %r" % out["errors"][:3])
if users > 0:
    step = max(1, n // users)
    for i in range(0, n, step)[:users]:
        call("PUT", "/org/bench-%d/settings?username=u%d" % (i // per_org, i), {"blocked_categories": [1, 2]})
print("   posted %d sessions in %d organisations, %d user settings" % (n, orgs, min(users, n)), flush=True)
PY

# the control plane's node follows the same buckets as the resolver will
want_settings=$(( (SESSIONS + 16383) / 16384 + users ))
while :; do
	m=$(curl -sf "http://$CP_HOST:8082/metrics" || true)
	got=$(awk '/^svcpf_readmodel_entries\{bucket="sessions"\}/ { print $2 + 0 }' <<< "$m")
	set=$(awk '/^svcpf_readmodel_entries\{bucket="settings"\}/ { print $2 + 0 }' <<< "$m")
	if [ "${got:-0}" -ge "$SESSIONS" ] && [ "${set:-0}" -ge "$want_settings" ]; then break; fi
	if [ $((SECONDS - t0)) -gt "${SESSIONS_TIMEOUT:-1800}" ]; then
		echo "   sessions: only ${got:-0} of $SESSIONS deployed (settings ${set:-0}) after $((SECONDS - t0)) s" >&2
		exit 1
	fi
	kill -0 $pid 2> /dev/null || { tail -n 20 "$cp/all.log" >&2; exit 1; }
	sleep 5
done
echo "   control plane: $got sessions, $set settings documents deployed in $((SECONDS - t0)) s"
echo "nats://$CP_HOST:4223" > "$WORK/nats.url"
