// Package policy is the one decision of DESIGN.md §6.3, shared by the
// simulator and the resolver: given a query (domain, path, answer address,
// time), a subscriber's compiled policy and the feeds' categories, it
// answers the verdict, the action, the reason, the rule that fired and an
// ordered trace of the steps evaluated.
//
// Data flow: identity (readmodel/sessions: ip | username | deviceid →
// session) → layers (settings.Stack.AppendLayers: global < org < profile <
// location < username < deviceid) → settings.Merge → Compile, once per
// (session id, settings version), kept in a Cache → Decide, once per query,
// with the categories of readmodel/feeds (*feeds.Set satisfies Categories).
//
// The package is pure: no I/O, no clock (the caller passes the time), no
// DNS library and no Prometheus registration (Metrics is an interface the
// caller implements; NopMetrics counts nothing). It imports
// readmodel/feeds only for its Category type. A decision for a compiled
// policy allocates nothing when the caller reuses a Decision (DecideInto);
// see docs/policy.md.
package policy
