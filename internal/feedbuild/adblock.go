package feedbuild

import (
	"slices"
	"strings"
)

// Causes of the adblock importer.
const (
	CauseCosmetic    Cause = "cosmetic"      // element hiding, scriptlets, HTML filters: ##, #@#, #?#, #$#, #%#, $$ …
	CauseException   Cause = "exception"     // @@ rules: the feed has no allow entries
	CauseRegex       Cause = "regex"         // /regex/ rules
	CauseOption      Cause = "option"        // an option a DNS filter cannot enforce ($third-party, $script, $domain= …)
	CauseBadfilter   Cause = "badfilter"     // a $badfilter rule: it disables another rule, imports nothing
	CauseDisabled    Cause = "disabled"      // a rule a $badfilter rule of the list disables
	CauseExcepted    Cause = "excepted"      // a rule for a name an unconditional @@||name^ exception of the list allows
	CauseNotHostRule Cause = "not-host-rule" // not anchored with || (/ads/, ad.js, |http://…, a bare name or IP)
	CausePattern     Cause = "pattern"       // a || rule no name or path prefix expresses: *, ^ inside, | at the end, a port, a partial name
)

// noteExceptionUnder counts exceptions (@@||name^) below a name the list
// blocks as a whole: the feed has no allow entries, so the name stays
// covered by its blocked parent. Rare in the real lists; reported so that
// an operator can add the name to an allowlist.
const noteExceptionUnder = "exception-under-blocked-name"

// enforceableOption reports whether a DNS filter enforces a rule with
// option o exactly as a browser would, or more strictly only where the
// list means the whole host: none narrows the rule to some requests.
//   - all: every request type — what a DNS block does.
//   - doc, document: the page itself; lists use it for sites that are bad
//     as a whole (badware, ad landing pages), so blocking the name is the
//     intent.
//   - important: only beats exceptions; it narrows nothing.
//
// Every other option narrows the rule to some requests (by type: script,
// image, xhr, popup …; by party: third-party, 1p …; by site: domain=, to=,
// from=, ipaddress=, denyallow= …), changes the response instead of
// blocking (redirect=, csp=, removeparam= …), or is negated (~…): a DNS
// filter, which sees only the name, would block more than the list says.
func enforceableOption(o string) bool {
	switch o {
	case "all", "doc", "document", "important":
		return true
	}
	return false
}

// adblockRule is what one line of an adblock list says.
type adblockRule struct {
	entry     Entry  // the imported key, when cause is ""
	cause     Cause  // why the line is skipped
	important bool   // $important: an exception does not lift it
	base      string // the rule in normal form, which a $badfilter names
	// hostException is set on an unconditional exception, @@||name^
	// (options at most all, doc, document, important): name is allowed.
	hostException string
}

// parseAdblockLine parses one line of an Adblock Plus / uBlock Origin
// filter list. Only rules that block a whole host (||name^) or a path on a
// host (||name/path^) are imported; the zero rule is a blank line.
func parseAdblockLine(line string) adblockRule {
	line = strings.TrimSpace(line)
	switch {
	case line == "":
		return adblockRule{}
	case line[0] == '!' || line[0] == '[' && line[len(line)-1] == ']':
		return adblockRule{cause: CauseComment}
	case isCosmetic(line):
		return adblockRule{cause: CauseCosmetic}
	case line[0] == '#':
		return adblockRule{cause: CauseComment}
	}
	body, exception := strings.CutPrefix(line, "@@")
	pattern, options, hasOptions := body, "", false
	if i := strings.LastIndexByte(body, '$'); i >= 0 && !isRegex(body) {
		pattern, options, hasOptions = body[:i], body[i+1:], true
	}
	r := adblockRule{}
	var opts []string
	badfilter, enforceable := false, true
	if hasOptions {
		for o := range strings.SplitSeq(options, ",") {
			o = strings.ToLower(strings.TrimSpace(o))
			switch {
			case o == "badfilter":
				badfilter = true
				continue
			case o == "important":
				r.important = true
			case !enforceableOption(o):
				enforceable = false
			}
			opts = append(opts, o)
		}
	}
	slices.Sort(opts)
	r.base = pattern
	if len(opts) > 0 {
		r.base += "$" + strings.Join(opts, ",")
	}
	if exception {
		r.base = "@@" + r.base
	}
	switch {
	case badfilter:
		r.cause = CauseBadfilter
		return r
	case isRegex(pattern):
		r.cause = CauseRegex
	case !strings.HasPrefix(pattern, "||"):
		r.cause = CauseNotHostRule
	case !enforceable:
		r.cause = CauseOption
	default:
		r.entry, r.cause = parseHostPattern(pattern[2:])
	}
	if exception {
		if r.cause == "" && r.entry.Path == "" {
			r.hostException = r.entry.Name
		}
		r.entry, r.cause = Entry{}, CauseException
	}
	return r
}

// parseHostPattern parses what follows "||": name, name^, name^|, or
// name/path with an optional ^ at the end.
func parseHostPattern(p string) (Entry, Cause) {
	host, tail := p, ""
	if i := strings.IndexAny(p, "/^"); i >= 0 {
		host, tail = p[:i], p[i:]
	}
	switch {
	case isIP(host):
		return Entry{}, CauseIP
	case host == "" || strings.ContainsAny(host, "*|:") ||
		strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") ||
		tail == "" && !strings.Contains(host, "."):
		// A wildcard, a port or scheme, or a partial name ("||ads.",
		// "||.example", "||check-tl-"): which names it covers is not a
		// set of names.
		return Entry{}, CausePattern
	}
	name, cause := normalizeName(host)
	if cause != "" {
		return Entry{}, cause
	}
	switch {
	case tail == "" || tail == "^" || tail == "^|":
		// "||name" without a separator also matches names that merely
		// start with name ("name.evil"); importing name covers a subset of
		// what the rule blocks, never more.
		return Entry{Name: name}, ""
	case tail[0] == '^':
		return Entry{}, CausePattern // "||name^*/ads", "||name^?x="
	}
	path := strings.TrimSuffix(tail, "^")
	if strings.ContainsAny(path, "*^|") {
		// A wildcard or separator inside, or "|" (the URL ends here): not a
		// prefix.
		return Entry{}, CausePattern
	}
	if !checkPath(path) {
		return Entry{}, CauseBadPath
	}
	return Entry{Name: name, Path: path}, ""
}

// isCosmetic reports whether line is a cosmetic (element hiding,
// scriptlet, CSS, HTML filtering) rule or exception: a "#" followed by
// "#", "@#", "?#", "$#", "%#", "$?#" or their "@" forms, or AdGuard's "$$"
// and "$@$".
func isCosmetic(line string) bool {
	if strings.Contains(line, "$$") || strings.Contains(line, "$@$") {
		return true
	}
	for i := strings.IndexByte(line, '#'); i >= 0; {
		rest := strings.TrimPrefix(line[i+1:], "@")
		rest = strings.TrimLeft(rest, "?$%")
		if strings.HasPrefix(rest, "#") && len(line[i+1:])-len(rest) <= 3 {
			return true
		}
		j := strings.IndexByte(line[i+1:], '#')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// isRegex reports whether p is a /regular expression/: slashes around
// something with a regex metacharacter. "/ads/" has none: it is a plain
// substring rule (not a host rule either way).
func isRegex(p string) bool {
	return len(p) > 2 && p[0] == '/' && p[len(p)-1] == '/' && strings.ContainsAny(p[1:len(p)-1], `\^$+?*()[]{}|.`)
}

// adblockImporter buffers the imported rules: a $badfilter or an exception
// anywhere in the list changes rules before it.
type adblockImporter struct {
	rules      []adblockRule
	badfilters map[string]bool
	exceptions []adblockRule
}

func newAdblockImporter() *adblockImporter {
	return &adblockImporter{badfilters: map[string]bool{}}
}

func (a *adblockImporter) line(s string, st *Stats, _ func(Entry)) error {
	r := parseAdblockLine(s)
	switch {
	case r.cause == "" && r.entry.Name != "":
		a.rules = append(a.rules, r)
	case r.cause == CauseBadfilter:
		a.badfilters[r.base] = true
		st.skip(r.cause)
	case r.cause != "":
		if r.hostException != "" {
			a.exceptions = append(a.exceptions, r)
		}
		st.skip(r.cause)
	}
	return nil
}

func (a *adblockImporter) finish(st *Stats, emit func(Entry)) error {
	allowed := map[string]bool{}
	for _, e := range a.exceptions {
		if !a.badfilters[e.base] {
			allowed[e.hostException] = true
		}
	}
	blocked := map[string]bool{}
	for _, r := range a.rules {
		switch {
		case a.badfilters[r.base]:
			st.skip(CauseDisabled)
		case !r.important && underAny(r.entry.Name, allowed):
			st.skip(CauseExcepted)
		default:
			if r.entry.Path == "" {
				blocked[r.entry.Name] = true
			}
			emit(r.entry)
		}
	}
	for name := range allowed {
		if i := strings.IndexByte(name, '.'); i >= 0 && underAny(name[i+1:], blocked) {
			st.note(noteExceptionUnder)
		}
	}
	return nil
}

// underAny reports whether name or one of its parents is in set.
func underAny(name string, set map[string]bool) bool {
	for {
		if set[name] {
			return true
		}
		i := strings.IndexByte(name, '.')
		if i < 0 {
			return false
		}
		name = name[i+1:]
	}
}
