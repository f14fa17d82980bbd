package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
)

// ParseQuery is r's query string, or an error for a 400 when it is
// malformed (`?ip=%ZZ`, a `;` separator). URL.Query drops such a pair
// without a word, and a request answered for other parameters than the
// client sent (no identity instead of an address) is worse than a refusal.
// The words are the orgmanager's (its organisation API query strings).
func ParseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("invalid query string: %w", err)
	}
	return q, nil
}
