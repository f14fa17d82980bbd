package config

import (
	"fmt"
	"regexp"
	"strings"
)

// envRef matches ${NAME} and ${NAME:-default}. A bare $NAME is left alone so
// that values such as passwords may contain dollar signs.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)

// UnsetError lists the ${NAME} references without a default whose
// variable is not set, each with its line, one a line.
type UnsetError struct {
	Refs []UnsetRef
}

// UnsetRef is one reference to an unset variable.
type UnsetRef struct {
	Line int    // 1-based
	Name string // the variable
}

func (e *UnsetError) Error() string {
	parts := make([]string, len(e.Refs))
	for i, r := range e.Refs {
		parts[i] = fmt.Sprintf("line %d: ${%s} is not set (set it, or write ${%s:-default})", r.Line, r.Name, r.Name)
	}
	return strings.Join(parts, "\n")
}

// ExpandEnv replaces ${NAME} with the variable's value and ${NAME:-default}
// with the default when the variable is unset or empty.
//
// A ${NAME} without a default whose variable is unset is an error (an
// *UnsetError naming every such reference and its line): a forgotten
// variable would otherwise turn into an empty password or URL that fails
// far from its cause. A variable set to the empty string is the
// operator's explicit choice and expands to "" (write ${NAME:-default} to
// treat empty as unset).
//
// References inside YAML comments (from a '#' at the start of a line or
// after a space or tab, outside quotes, to the end of the line) are left
// as written: they are neither expanded nor checked, so commenting a line
// out also silences its variables.
func ExpandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var (
		b     strings.Builder
		unset []UnsetRef
	)
	b.Grow(len(s))
	line := 0
	for len(s) > 0 {
		line++
		end := strings.IndexByte(s, '\n')
		var l string
		if end < 0 {
			l, s = s, ""
		} else {
			l, s = s[:end+1], s[end+1:]
		}
		code, comment := splitComment(l)
		b.WriteString(envRef.ReplaceAllStringFunc(code, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			v, ok := lookup(m[1])
			hasDefault := strings.Contains(ref, ":-")
			switch {
			case hasDefault && (!ok || v == ""):
				return m[2]
			case !ok:
				unset = append(unset, UnsetRef{Line: line, Name: m[1]})
				return ""
			}
			return v
		}))
		b.WriteString(comment)
	}
	if len(unset) > 0 {
		return "", &UnsetError{Refs: unset}
	}
	return b.String(), nil
}

// splitComment splits a line at the '#' that starts its YAML comment: at
// the start of the line or after a space or tab, outside single and double
// quotes. Quotes are tracked within the line only, which is what YAML's
// flow scalars on one line need; a '#' inside a block scalar (| or >)
// after a space is taken for a comment here (documented in
// docs/configuration.md).
func splitComment(l string) (code, comment string) {
	var quote byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote == '"' && c == '\\':
			i++ // an escaped character, a quote included
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			// A quote opens a scalar only at its start; inside a plain
			// scalar (pa'ss) it is a character.
			if i == 0 || strings.IndexByte(" \t:[{,-", l[i-1]) >= 0 {
				quote = c
			}
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i], l[i:]
		}
	}
	return l, ""
}
