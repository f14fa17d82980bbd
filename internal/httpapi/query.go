package httpapi

import (
	"fmt"
	"net/url"
)

// ParseQuery parses a raw query string (URL.RawQuery), or answers an error
// for a 400 when it is malformed (`?ip=%ZZ`, a `;` separator): every HTTP
// API of the project reads its query strings through it. URL.Query drops
// such a pair without a word, and a request answered for other parameters
// than the client sent (no identity instead of an address, a write meant
// for a username landing on the organisation's layer) is worse than a
// refusal.
func ParseQuery(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid query string: %w", err)
	}
	return q, nil
}
