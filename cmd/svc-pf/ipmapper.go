package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
)

const ipmapperSessionsUsage = `Usage:
  svc-pf ipmapper sessions --ip ADDR | --org ORG | --username NAME | --deviceid ID | --id ID
                           [--limit N] [--after ID] [--url http://127.0.0.1:8083]
                           [--producer NAME] [--token-file FILE] [--json]

Shows what the IP Mapper's session table holds, read-only, from GET /sessions on its
HTTP listener (http.address; ipmapper.http.address under svc-pf all). --ip is the
longest-prefix match; the other selectors list every match in id order, a page of
--limit (default 100, at most 10000) at a time: the footer gives the next --after.
--producer keeps only that producer's sessions (radius for RADIUS accounting's;
--producer '' for the orgmanager's, shown as - in the PRODUCER column).

GET /sessions needs a bearer token (docs/access.md): --token-file names a file holding
one (under svc-pf all, <data_dir>/admin.token is the first admin token), else the
environment variable SVCPF_TOKEN is sent when set.

Exit status: 0 answered (also when nothing matched), 1 the IP Mapper could not be
reached or did not answer (not running, loading, on standby), 2 a bad command line
or a query the IP Mapper refused (400).
`

// sessionsTimeout bounds one query: the endpoint reads an in-memory
// snapshot, so anything slower is a wrong address or a hung process.
const sessionsTimeout = 10 * time.Second

// runIPMapperSessions is `svc-pf ipmapper sessions …`.
func runIPMapperSessions(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("svc-pf ipmapper sessions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ipmapperSessionsUsage) }
	base := fs.String("url", "http://127.0.0.1:8083", "the IP Mapper's HTTP listener")
	tokenFile := fs.String("token-file", "", "a file holding the bearer token (default: $SVCPF_TOKEN)")
	asJSON := fs.Bool("json", false, "print the endpoint's JSON reply instead of a table")
	limit := fs.Int("limit", 0, "sessions per page, 1..10000 (default: the IP Mapper's, 100)")
	after := fs.String("after", "", "continue after this session id (the previous page's next)")
	producer := fs.String("producer", "", "only this producer's sessions ('' for the orgmanager's)")
	producerSet := false
	selectors := []string{"ip", "org", "username", "deviceid", "id"}
	values := map[string]*string{}
	for _, name := range selectors {
		values[name] = fs.String(name, "", "select by "+name)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "svc-pf ipmapper sessions: unexpected arguments %q\n", fs.Args())
		return 2
	}

	// Each flag set on the command line goes to the query as the
	// endpoint's parameter of the same name, so the IP Mapper, not this
	// command, decides what a selector means; the checks here only say
	// early what it would refuse.
	q := url.Values{}
	var chosen []string
	limitSet := false
	fs.Visit(func(f *flag.Flag) {
		if _, ok := values[f.Name]; ok {
			chosen = append(chosen, "--"+f.Name)
			q.Set(f.Name, f.Value.String())
		}
		limitSet = limitSet || f.Name == "limit"
		producerSet = producerSet || f.Name == "producer"
	})
	switch {
	case len(chosen) == 0:
		fmt.Fprintf(stderr, "svc-pf ipmapper sessions: give one of --ip, --org, --username, --deviceid, --id\n\n%s", ipmapperSessionsUsage)
		return 2
	case len(chosen) > 1:
		fmt.Fprintf(stderr, "svc-pf ipmapper sessions: give one selector, not %s\n", strings.Join(chosen, " and "))
		return 2
	}
	if ip := *values["ip"]; ip != "" {
		if _, err := netip.ParseAddr(ip); err != nil {
			fmt.Fprintf(stderr, "svc-pf ipmapper sessions: --ip %q is not an IP address\n", ip)
			return 2
		}
	}
	if limitSet {
		if *limit < 1 || *limit > ipmapper.SessionsMaxLimit {
			fmt.Fprintf(stderr, "svc-pf ipmapper sessions: --limit must be 1..%d\n", ipmapper.SessionsMaxLimit)
			return 2
		}
		q.Set("limit", fmt.Sprint(*limit))
	}
	if *after != "" {
		q.Set("after", *after)
	}
	if producerSet {
		q.Set("producer", *producer)
	}
	endpoint, err := sessionsURL(*base, q)
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf ipmapper sessions: --url %q: %v\n", *base, err)
		return 2
	}

	token := os.Getenv("SVCPF_TOKEN")
	if *tokenFile != "" {
		data, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "svc-pf ipmapper sessions: --token-file: %v\n", err)
			return 2
		}
		token = strings.TrimSpace(string(data))
	}
	body, code, err := fetchSessions(ctx, endpoint, token)
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf ipmapper sessions: %v\n", err)
		return 1
	}
	if code != http.StatusOK {
		msg := errorText(body)
		fmt.Fprintf(stderr, "svc-pf ipmapper sessions: the IP Mapper at %s answered %d: %s\n", *base, code, msg)
		if code >= 400 && code < 500 {
			return 2
		}
		return 1
	}
	var reply wire.SessionsReply
	if err := json.Unmarshal(body, &reply); err != nil {
		fmt.Fprintf(stderr, "svc-pf ipmapper sessions: %s did not answer with a sessions reply (%v): is --url an IP Mapper's listener?\n", *base, err)
		return 1
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		if len(body) > 0 && body[len(body)-1] != '\n' {
			fmt.Fprintln(stdout)
		}
		return 0
	}
	printSessions(stdout, reply)
	return 0
}

// sessionsURL is base's /sessions with q; base is the listener's root, as
// an operator copies it from the configuration (a bare host:port works).
func sessionsURL(base string, q url.Values) (string, error) {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("want an http:// or https:// URL, not %s://", u.Scheme)
	case u.Host == "":
		return "", errors.New("no host")
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/sessions"
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// fetchSessions GETs the endpoint. Its error says what to check: the
// operator's next step depends on whether nothing listens there or
// something else does.
func fetchSessions(ctx context.Context, endpoint, token string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, sessionsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var dnsErr *net.DNSError
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, 0, fmt.Errorf("cannot reach the IP Mapper at %s: connection refused — is `svc-pf ipmapper` (or `svc-pf all`) running, and is --url its http.address (ipmapper.http.address under svc-pf all)?", hostOf(endpoint))
		case errors.As(err, &dnsErr):
			return nil, 0, fmt.Errorf("cannot resolve the IP Mapper's host %s: %v — check --url", hostOf(endpoint), dnsErr)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, 0, fmt.Errorf("no answer from %s within %v — check --url, and that nothing (a firewall) holds the connection", hostOf(endpoint), sessionsTimeout)
		}
		return nil, 0, fmt.Errorf("cannot reach the IP Mapper at %s: %v", hostOf(endpoint), err)
	}
	defer resp.Body.Close()
	// The largest reply (10 000 sessions of attributes up to 1 KiB each)
	// stays well under this; a bound keeps a wrong --url from filling memory.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the reply of %s: %v", hostOf(endpoint), err)
	}
	return body, resp.StatusCode, nil
}

func hostOf(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		return u.Scheme + "://" + u.Host
	}
	return endpoint
}

// errorText is the {"error": …} of a refusal, or the start of whatever
// else came back (another service on that port).
func errorText(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s + " — is --url an IP Mapper's listener?"
}

// printSessions writes the reply as a table, one session a line, and a
// footer with the count and the next page.
func printSessions(w io.Writer, r wire.SessionsReply) {
	if len(r.Sessions) == 0 {
		fmt.Fprintln(w, "no sessions")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tORG\tPRODUCER\tALLOCATIONS\tUSERNAME\tDEVICEID\tLOCATION\tREVISION\tUPDATED\tEXPIRES")
	for _, s := range r.Sessions {
		allocs := make([]string, len(s.Allocations))
		for i, a := range s.Allocations {
			allocs[i] = a.String()
		}
		expires := "-"
		if s.ExpiresAt != nil {
			expires = s.ExpiresAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", cell(s.ID), cell(s.Org), cell(s.Producer), strings.Join(allocs, ","),
			cell(s.Username), cell(s.DeviceID), cell(s.Location), s.Revision, s.UpdatedAt.UTC().Format(time.RFC3339), expires)
	}
	_ = tw.Flush()
	switch {
	case r.Next != "":
		fmt.Fprintf(w, "%d of %d sessions; next page: --after %s\n", r.Count, r.Total, r.Next)
	case r.Count == 1:
		fmt.Fprintln(w, "1 session")
	default:
		fmt.Fprintf(w, "%d sessions\n", r.Count)
	}
}

// cell makes a value safe for one table cell: "-" when empty, and quoted
// Go-style when it holds anything but printable characters (a tab or
// newline in a username would break the columns, an escape sequence would
// reach the terminal, invalid UTF-8 would print as something else).
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
