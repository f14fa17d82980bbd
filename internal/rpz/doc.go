// Package rpz is the operator's Response Policy Zones (step 3 of the
// decision, docs/policy.md) with PowerDNS Recursor semantics: zone files
// named in the node config, parsed into per-zone maps of QNAME triggers, and
// checked for every query between the allowlist and the blocklist.
//
// Data flow: node config `rpz:` ([]ZoneConfig) → New loads each zone file
// (Parse: miekg/dns's zone parser, then the RPZ subset this package
// supports) → an immutable Snapshot of all zones, published through an
// atomic pointer → policy.DecideInto step 3 calls Snapshot.Check through the
// policy.RPZ interface (Set.RPZ gives the value for policy.View.RPZ). The
// simulator and the resolver read the same Set, so a simulation sees the
// zones DNS uses. Set.Run polls each file's identity, size and mtime and
// swaps in a reloaded zone; a zone that fails to load keeps its last good
// version and reports the error in Status.
//
// Check allocates nothing, except for a local CNAME whose target is a
// wildcard ("*.garden.example."), which builds the query's own target. The
// package counts no queries: Check also serves the simulator, whose
// queries are not DNS statistics, and PowerDNS's policy-result-noaction
// counts every query without an RPZ hit, which only the resolver sees; it
// counts with ResultOf. README.md lists the supported subset, what is
// skipped and why, and the precedence rules.
package rpz
