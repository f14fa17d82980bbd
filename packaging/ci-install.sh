#!/usr/bin/env bash
# Builds svc-pf's Debian package, installs it, checks what it installed,
# starts and stops `svc-pf all` as its unit would, and removes and purges
# the package again, checking that it is gone:
#   packaging/ci-install.sh
# Needs root (it re-runs itself with sudo otherwise), dpkg, setpriv and curl;
# .ci/run calls it after the tests.
# The machine is left as it was: a svc-pf package already installed is
# refused rather than replaced, every listener is on a kernel-chosen
# loopback port, and the svc-pf user and /var/lib/svc-pf are removed again
# when this script created them.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then exec sudo --preserve-env=PATH,GOPATH,GOCACHE,GOMODCACHE,HOME "$0" "$@"; fi
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

fail() { echo "ci-install.sh: $*" >&2; exit 1; }

pkg_status() { dpkg-query -W -f '${db:Status-Status}' svc-pf 2>/dev/null || echo not-installed; }
if [ "$(pkg_status)" != not-installed ]; then
  fail "a svc-pf package is already installed here; this check installs and purges its own, so it refuses to replace that one (dpkg -P svc-pf first if it is a leftover)"
fi
had_user=; getent passwd svc-pf >/dev/null && had_user=1
had_state=; [ -e /var/lib/svc-pf ] && had_state=1

work="$(mktemp -d)"
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== build"
deb="$(packaging/build-deb.sh "$work")"
version="$(dpkg-deb -f "$deb" Version)"
echo "$deb ($version)"

echo "== dpkg -i"
dpkg -i "$deb"
[ -x /usr/bin/svc-pf ] || fail "/usr/bin/svc-pf was not installed"
got="$(/usr/bin/svc-pf --version)"
echo "$got"
case "$got" in
"svc-pf $version"*) ;;
*) fail "/usr/bin/svc-pf --version says \"$got\", want the package's version $version" ;;
esac
for f in /lib/systemd/system/svc-pf-{orgmanager,ipmapper,simulator,resolver,activity,radius,all,feed-update,feed-serve}.service \
  /etc/svc-pf/{orgmanager,ipmapper,simulator,resolver,activity,radius,all,feed-update,feed-serve}.yaml /usr/share/doc/svc-pf/copyright; do
  [ -f "$f" ] || fail "$f was not installed"
done
# The installed configurations pass the installed binary's own check (the
# simulator's API key has no default: an operator sets it).
for cmd in orgmanager ipmapper simulator resolver activity radius all feed-update feed-serve; do
  # shellcheck disable=SC2086 # feed-update is the two words "feed update", feed-serve "feed serve"
  SVCPF_SIMULATOR_API_KEY=ci-check SVCPF_RADIUS_SECRET=ci-check /usr/bin/svc-pf check -c "/etc/svc-pf/$cmd.yaml" ${cmd/-/ } ||
    fail "/etc/svc-pf/$cmd.yaml does not pass svc-pf check ${cmd/-/ }"
done
getent passwd svc-pf >/dev/null || fail "postinst did not create the user svc-pf"
[ "$(stat -c %U /var/lib/svc-pf)" = svc-pf ] || fail "/var/lib/svc-pf is not owned by svc-pf"

if command -v systemd-analyze >/dev/null 2>&1; then
  echo "== systemd-analyze verify"
  # --man=no: the units' Documentation= is a file, not a man page.
  systemd-analyze verify --man=no /lib/systemd/system/svc-pf-*.service
else
  echo "== systemd-analyze not installed: units not verified"
fi

if [ -x /usr/sbin/nats-server ]; then
  echo "== nats-server -t on the cluster's configurations"
  for conf in packaging/nats/nats-*.conf; do
    /usr/sbin/nats-server -c "$conf" -t
  done
fi

promtool="$(command -v promtool || true)"
if [ -z "$promtool" ]; then
  # Debian's prometheus package holds promtool; unpacked, not installed,
  # so that no Prometheus server is started on this machine.
  (cd "$work" && apt-get download prometheus >/dev/null 2>&1 && dpkg-deb -x prometheus_*.deb prometheus) &&
    promtool="$work/prometheus/usr/bin/promtool"
fi
[ -n "$promtool" ] && [ -x "$promtool" ] || fail "promtool is neither installed nor downloadable (apt-get download prometheus)"
echo "== promtool check rules"
"$promtool" check rules packaging/prometheus/svc-pf-rules.yaml

echo "== start and stop svc-pf all"
# Every listener on a kernel-chosen loopback port: nothing else on the
# machine is disturbed. The unit reads these from /etc/svc-pf/all.env.
env_file=/etc/svc-pf/all.env
env_lines='SVCPF_NATS_LISTEN=127.0.0.1:0
SVCPF_ORGMANAGER_ADDRESS=127.0.0.1:0
SVCPF_IPMAPPER_ADDRESS=127.0.0.1:0
SVCPF_NODE_ADDRESS=127.0.0.1:0
SVCPF_SIMULATOR_ADDRESS=127.0.0.1:0
SVCPF_DNS_LISTEN=127.0.0.1:0'
echo "$env_lines" | tee "$env_file" >/dev/null
log="$work/all.log"
# address_of MSG: the address the log line MSG ("node listening", …) names.
address_of() { sed -n "s/.*msg=\"$1\".* address=\([0-9.:]*\).*/\1/p" "$log" | tail -n 1; }
wait_healthy() {
  local node org
  for _ in $(seq 1 60); do
    node="$(address_of 'node listening')"; org="$(address_of 'orgmanager listening')"
    if [ -n "$node" ] && [ -n "$org" ] && curl -sf "http://$node/health" >/dev/null &&
      curl -sf "http://$org/health" >/dev/null; then
      curl -s "http://$node/health"; echo
      return 0
    fi
    sleep 1
  done
  cat "$log" >&2
  fail "svc-pf all did not turn healthy within 60 s (its log is above)"
}
if [ -d /run/systemd/system ]; then
  since="$(date '+%Y-%m-%d %H:%M:%S')"
  systemctl start svc-pf-all.service
  for _ in $(seq 1 60); do
    journalctl -u svc-pf-all.service --since "$since" -o cat >"$log" 2>/dev/null || true
    grep -q 'msg="node listening"' "$log" && grep -q 'msg="orgmanager listening"' "$log" && break
    sleep 1
  done
  wait_healthy
  systemctl stop svc-pf-all.service
  if systemctl --quiet is-failed svc-pf-all.service; then
    fail "svc-pf-all.service failed on stop: $(systemctl status svc-pf-all.service --no-pager || true)"
  fi
else
  # No systemd here: run the unit's ExecStart as the unit would, as its
  # User=, in its WorkingDirectory=, with its EnvironmentFile=.
  unit=/lib/systemd/system/svc-pf-all.service
  exec_start="$(sed -n 's/^ExecStart=//p' "$unit")"
  user="$(sed -n 's/^User=//p' "$unit")"
  workdir="$(sed -n 's/^WorkingDirectory=//p' "$unit")"
  [ -n "$exec_start" ] && [ -n "$user" ] && [ -n "$workdir" ] || fail "$unit lacks ExecStart=, User= or WorkingDirectory="
  echo "as $user in $workdir: $exec_start"
  read -r -a argv <<<"$exec_start"
  # shellcheck disable=SC2046 # the env file's lines are NAME=VALUE words
  (cd "$workdir" && exec setpriv --reuid="$user" --regid="$user" --init-groups \
    env $(grep -v '^#' "$env_file") "${argv[@]}") >"$log" 2>&1 &
  pid=$!
  wait_healthy
  kill -TERM "$pid"
  rc=0
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then fail "svc-pf all did not stop within 30 s of SIGTERM"; fi
  wait "$pid" || rc=$?
  pid=
  [ "$rc" = 0 ] || { cat "$log" >&2; fail "svc-pf all exited with status $rc on SIGTERM, want 0"; }
  grep -q 'msg="svc-pf all stopped"' "$log" || fail "svc-pf all's log does not say it stopped cleanly"
fi
echo "started, healthy, stopped cleanly"
rm -f "$env_file"

echo "== dpkg -r, dpkg -P"
dpkg -r svc-pf
[ ! -e /usr/bin/svc-pf ] || fail "/usr/bin/svc-pf is still there after dpkg -r"
[ ! -e /lib/systemd/system/svc-pf-all.service ] || fail "the units are still there after dpkg -r"
[ -f /etc/svc-pf/all.yaml ] || fail "dpkg -r removed the conffiles (only a purge should)"
dpkg -P svc-pf
[ ! -e /etc/svc-pf/all.yaml ] || fail "/etc/svc-pf/all.yaml is still there after dpkg -P"
[ "$(pkg_status)" = not-installed ] || fail "dpkg still knows svc-pf after the purge: $(pkg_status)"
# The state and the user outlive a purge on purpose; remove what this
# check created.
[ -n "$had_state" ] || rm -rf /var/lib/svc-pf
if [ -z "$had_user" ]; then
  userdel svc-pf
  if getent group svc-pf >/dev/null; then groupdel svc-pf; fi
fi
rmdir /etc/svc-pf 2>/dev/null || true
echo "ci-install.sh: ok"
