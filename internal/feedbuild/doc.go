// Package feedbuild is the write side of the category feeds
// (docs/feeds.md): `svc-pf feed build|update|serve|lookup`.
//
// Data flow: filter lists (hosts files, domain lists, adblock lists, RPZ
// zones, CSV; local files, or URLs fetched by fetch.go with conditional
// GETs and bounds, a failed or suspicious fetch falling back on the
// source's last good body, urlsource.go) → importers (one per source
// format; each counts what it took and what it skipped, and why) → the
// new content of the feed → the next
// version of a feed directory (internal/feed's format): a delta or a
// snapshot, feed-codes.json, and feed.json last by atomic rename → `feed
// serve` publishes the directory over HTTP → every node's feed index
// (internal/readmodel/feeds) polls it. `feed lookup` and a build's reading
// of the previous version go through that package's Load, the one reader of
// feed directories, and lookup answers with a node's own lookup. The
// update loop (update.go: `feed_sources:` in `svc-pf all` and `svc-pf feed
// update`) runs Build per feed on an interval and keeps per-source health
// and the svcpf_feed_source_* metrics.
//
// Nodes never import this package: it is the operator's tool, not part of
// the query path. docs/feeds.md describes the importers, the versioning and
// pruning scheme and the command line.
package feedbuild
