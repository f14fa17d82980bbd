// Package policy is the one decision (docs/policy.md), shared by the
// simulator and the resolver: given a query (domain, path, answer address,
// the answer's CNAME chain, time), a subscriber's compiled policy and the
// feeds' categories, it answers the verdict, the action, the reason, the rule
// that fired and an ordered trace of the steps evaluated.
//
// Data flow: identity (readmodel/sessions: ip | username | deviceid →
// session) → layers (settings.Stack.AppendLayers: global < org < profile <
// location < username < deviceid) → settings.Merge → CompileWith, once per
// distinct set of merged documents (Key), kept in a Cache → DecideInto, once
// per query, with the categories of readmodel/feeds (*feeds.Set satisfies Categories).
// Engine runs that whole chain over a View of the node's read models:
// Evaluate for the simulator (explained, allocating), PolicyFor and
// DecideInto for the resolver (no allocation once cached); both reach the
// same cached Policy for the same client.
//
// The package is pure: no I/O, no clock (the caller passes the time), no
// DNS library and no Prometheus registration (Metrics, the policy cache's
// lookups, is an interface the caller implements). It reads the read models
// through small interfaces (Sessions, Settings, Categories, RPZ). A decision for a compiled
// policy allocates nothing when the caller reuses a Decision (DecideInto);
// see docs/policy.md.
package policy
