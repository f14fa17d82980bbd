#!/usr/bin/env bash
# Feed build from the real filter lists (the directory LISTS names, by
# default ../shared/data/feeds beside the repository; never copied into it): the counts docs/feeds.md reports, per list and
# cause, the time of a build, and a few lookups.
#  1. EasyList → 1 advertising, EasyPrivacy → 2 tracking, uBlock badware →
#     3 badware, URLhaus → 4 malware read twice: its host lines with the
#     domains importer (IP lines skipped), its ||host/path^$all rules with
#     the adblock importer (path entries);
#  2. the same build again (no change: no new version);
#  3. the Go benchmarks of a whole build and of the adblock importer.
# Usage: bench/feeds.sh [quick]   (quick skips the Go benchmarks)
set -euo pipefail
cd "$(dirname "$0")/.."
lists=${LISTS:-../shared/data/feeds}
[ -f "$lists/easylist.txt" ] || { echo "the real lists are missing: want $lists/easylist.txt (set LISTS=DIR)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/svc-pf" ./cmd/svc-pf
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
build() {
	"$work/svc-pf" feed build --dir "$work/threats" --name threats \
		--title 1=advertising --title 2=tracking --title 3=badware --title 4=malware \
		adblock:1:$lists/easylist.txt adblock:2:$lists/easyprivacy.txt adblock:3:$lists/badware.min.txt \
		domains:4:$lists/urlhaus-filter-online.txt adblock:4:$lists/urlhaus-filter-online.txt
}
time build
time build
for q in cdn.0014b04291.com 2024.sci-hub.se/2294/7a43bb4cf6c57229b02a9604a1f4614e/skidmore1966.pdf vlc.de example.com; do
	"$work/svc-pf" feed lookup --dir "$work/threats" "$q"
done
[ "${1:-}" = quick ] && exit 0
go test -run '^$' -bench 'BuildRealLists|ImportEasyList' -benchmem ./internal/feedbuild/ | grep -E '^Benchmark'
