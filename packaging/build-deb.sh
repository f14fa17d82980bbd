#!/usr/bin/env bash
# Builds the Debian package of svc-pf from this repository with dpkg-deb:
#   packaging/build-deb.sh [OUTDIR]        (default OUTDIR: dist/)
# It prints the path of the .deb it wrote. The version is SVCPF_VERSION when
# set, else derived from `git describe` (0.0.0~git<date>.<commit> without a
# tag), and is both the package's and the binary's (`svc-pf --version`).
# The architecture is GOARCH's (the host's unless set).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out="${1:-dist}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

export PATH="$PATH:/usr/local/go/bin"
arch="${GOARCH:-$(go env GOARCH)}"
if [ -n "${SVCPF_VERSION:-}" ]; then
  version="$SVCPF_VERSION"
elif tag="$(git describe --tags --abbrev=0 2>/dev/null)"; then
  version="${tag#v}"
  if [ "$(git rev-list -n 1 "$tag")" != "$(git rev-parse HEAD)" ]; then
    version="$version+git$(git log -1 --format=%cd --date=format:%Y%m%d).$(git rev-parse --short=12 HEAD)"
  fi
else
  version="0.0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S).$(git rev-parse --short=12 HEAD)"
fi
# A Debian version starts with a digit and holds [A-Za-z0-9.+~-].
if ! [[ "$version" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]]; then
  echo "build-deb.sh: version \"$version\" is not a Debian version (digits first, then [A-Za-z0-9.+~-]); set SVCPF_VERSION" >&2
  exit 1
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
pkg="$stage/svc-pf"
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/etc/svc-pf" \
  "$pkg/usr/share/doc/svc-pf/examples"

# The binary: static (no cgo), reproducible paths, the version compiled in.
CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -buildvcs=true \
  -ldflags "-s -w -X main.version=$version" -o "$pkg/usr/bin/svc-pf" ./cmd/svc-pf

install -m 0644 packaging/systemd/svc-pf-*.service "$pkg/lib/systemd/system/"
# The examples twice: as the configuration (conffiles, which dpkg keeps
# when the operator has edited them) and as pristine copies to compare with.
for f in examples/config/*.yaml; do
  install -m 0644 "$f" "$pkg/etc/svc-pf/"
  install -m 0644 "$f" "$pkg/usr/share/doc/svc-pf/examples/"
done
install -d "$pkg/usr/share/doc/svc-pf/examples/nats"
install -m 0644 packaging/nats/nats-*.conf "$pkg/usr/share/doc/svc-pf/examples/nats/"
install -m 0644 LICENSE "$pkg/usr/share/doc/svc-pf/copyright"
install -m 0644 docs/operations.md "$pkg/usr/share/doc/svc-pf/operations.md"
install -m 0644 README.md "$pkg/usr/share/doc/svc-pf/README.md"
(cd "$pkg" && find etc -type f | sort | sed 's|^|/|') > "$pkg/DEBIAN/conffiles"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$pkg/DEBIAN/"

size_kib="$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)"
cat > "$pkg/DEBIAN/control" <<CONTROL
Package: svc-pf
Version: $version
Architecture: $arch
Maintainer: svc-pf developers <svc-pf@users.noreply.github.com>
Installed-Size: $size_kib
Depends: passwd
Recommends: systemd
Suggests: postgresql, nats-server
Section: net
Priority: optional
Homepage: https://github.com/svc-pf/svc-pf
Description: subscriber-aware DNS content-filtering platform
 svc-pf gives every subscriber of an operator (an organisation, and inside
 it a user, a device, a location) its own DNS filtering policy: a REST API
 and web console (orgmanager), the session table (ipmapper), the filtering
 DNS server (resolver), a verdict simulator and an activity collector, as
 one binary with a systemd unit per service, or all of them in one process
 (svc-pf-all.service).
 .
 No unit is enabled on installation: see /usr/share/doc/svc-pf/operations.md.
CONTROL

deb="$out/svc-pf_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zgzip --build "$pkg" "$deb" >/dev/null
echo "$deb"
