// Package feedbuild is the write side of the category feeds
// (docs/feeds.md): `svc-pf feed build|serve|lookup`.
//
// Data flow: filter lists (hosts files, domain lists, adblock lists, RPZ
// zones, CSV) → importers (one per source format; each counts what it took
// and what it skipped, and why) → the new content of the feed → the next
// version of a feed directory (internal/feed's format): a delta or a
// snapshot, feed-codes.json, and feed.json last by atomic rename → `feed
// serve` publishes the directory over HTTP → every node's feed index
// (internal/readmodel/feeds) polls it. `feed lookup` and a build's reading
// of the previous version go through that package's Load, the one reader of
// feed directories, and lookup answers with a node's own lookup.
//
// Nodes never import this package: it is the operator's tool, not part of
// the query path. docs/feeds.md describes the importers, the versioning and
// pruning scheme and the command line.
package feedbuild
