package feedbuild

import (
	"io"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// CausePassthru is the rpz importer's cause for a PASSTHRU trigger
// (`CNAME rpz-passthru.`, or a CNAME to the trigger's own name): an allow
// rule, not a listing. Records the zone parser makes no trigger of are
// counted under its own skip reasons (rpz.SkipReason: "apex", "zone-data",
// "rpz-ip" …).
const CausePassthru Cause = "passthru"

// noteWildcardOnly counts "*.name" triggers whose zone has no trigger for
// name itself. RPZ's wildcard leaves name out; the feed's key for name
// covers it too (docs/feeds.md).
const noteWildcardOnly = "wildcard-without-apex"

// importRPZ imports the QNAME triggers of an RPZ zone file as the node's
// RPZ reads them (rpz.Parse, the one parser of zone files): every trigger
// but a passthru is an entry for its name, "*.name" one for name.
func importRPZ(r io.Reader, st *Stats, emit func(Entry)) error {
	z, err := rpz.Parse(r, rpz.ParseOptions{Name: "source"})
	if err != nil {
		return err
	}
	for reason, n := range z.Stats().Skipped {
		for range n {
			st.skip(Cause(reason))
		}
	}
	names, wildcards := map[string]bool{}, map[string]bool{}
	for t := range z.Triggers() {
		switch {
		case t.Verdict == policy.VerdictAllow:
			st.skip(CausePassthru)
			continue
		case t.Wildcard && t.Name == "":
			st.skip(CauseWildcard) // a bare "*" would be every name
			continue
		}
		name, cause := normalizeName(t.Name)
		if cause != "" {
			st.skip(cause)
			continue
		}
		if t.Wildcard {
			wildcards[name] = true
		} else {
			names[name] = true
		}
		emit(Entry{Name: name})
	}
	for w := range wildcards {
		if !names[w] {
			st.note(noteWildcardOnly)
		}
	}
	return nil
}
