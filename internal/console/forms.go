package console

import (
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// The form parsers: each turns a form's values into the input of one
// operation, or says which field is wrong. They check only what the form
// itself can get wrong (a value missing, a number that is not one); every
// rule about the values is the operation's (orgmanager.Ops), so the console
// and the API refuse the same things with the same words.

// fieldErrors are refusals by form field.
type fieldErrors map[string]string

type signinInput struct{ token string }

func parseSignin(v url.Values) (signinInput, string) {
	tok := strings.TrimSpace(v.Get("token"))
	if tok == "" {
		return signinInput{}, "Enter a token."
	}
	// The bearer header's rule: one printable word of bounded length.
	if _, err := access.BearerToken("Bearer " + tok); err != nil {
		return signinInput{}, "That token is not valid (unknown, expired or revoked)."
	}
	return signinInput{token: tok}, ""
}

// splitList reads a list typed one item a line (or separated by spaces or
// commas).
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == '\n' || r == '\r' || r == ' ' || r == '\t' || r == ','
	})
}

// parsePrefixForm reads the prefixes form: the CIDRs to add, or the one to
// remove.
func parsePrefixForm(v url.Values) (add, remove []string, errs fieldErrors) {
	add, remove = splitList(v.Get("add")), splitList(v.Get("remove"))
	if len(add) == 0 && len(remove) == 0 {
		return nil, nil, fieldErrors{"add": "enter at least one CIDR"}
	}
	return add, remove, nil
}

// parseOverrideForm reads the override form. Empty attributes are absent,
// as in the API; meta is JSON text or empty.
func parseOverrideForm(v url.Values) (orgmanager.OverrideInput, fieldErrors) {
	var in orgmanager.OverrideInput
	cidr := strings.TrimSpace(v.Get("cidr"))
	if cidr == "" {
		return in, fieldErrors{"cidr": "missing required field: cidr"}
	}
	in.CIDR = &cidr
	for _, f := range []struct {
		name string
		dst  **string
	}{{"username", &in.Username}, {"deviceid", &in.DeviceID}, {"location", &in.Location}} {
		if s := v.Get(f.name); s != "" {
			*f.dst = &s
		}
	}
	if m := strings.TrimSpace(v.Get("meta")); m != "" {
		in.Meta = []byte(m)
	}
	return in, nil
}

// csvColumns are the import's columns, in order; a first row naming them is
// a header and skipped.
var csvColumns = []string{"cidr", "username", "deviceid", "location", "meta", "delete"}

// rowError is one refused CSV row (1-based line).
type rowError struct {
	Line int
	CIDR string
	Msg  string
}

// parseCSV turns CSV text into batch operations through the batch's own
// item rule (orgmanager.BatchItem). Every refused row is reported; the
// caller writes nothing when any is.
func parseCSV(text string) ([]orgstore.BatchOp, []rowError, error) {
	r := csv.NewReader(strings.NewReader(text))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	var (
		ops  []orgstore.BatchOp
		errs []rowError
	)
	for n := 0; ; n++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, nil, fmt.Errorf("line %d: %v", pe.Line, pe.Err)
			}
			return nil, nil, err
		}
		// Only after a record was read: FieldPos panics after an error.
		line, _ := r.FieldPos(0)
		if n == 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "cidr") {
			continue // the header
		}
		if len(ops)+len(errs) == orgmanager.MaxBatchItems {
			return nil, nil, fmt.Errorf("more than %d rows; the limit is %d", orgmanager.MaxBatchItems, orgmanager.MaxBatchItems)
		}
		if len(rec) > len(csvColumns) {
			errs = append(errs, rowError{Line: line, Msg: fmt.Sprintf("%d columns; at most %d (%s)", len(rec), len(csvColumns), strings.Join(csvColumns, ", "))})
			continue
		}
		var in orgmanager.OverrideInput
		for i, val := range rec {
			val = strings.TrimSpace(val)
			if val == "" {
				continue
			}
			s := val
			switch csvColumns[i] {
			case "cidr":
				in.CIDR = &s
			case "username":
				in.Username = &s
			case "deviceid":
				in.DeviceID = &s
			case "location":
				in.Location = &s
			case "meta":
				in.Meta = []byte(s)
			case "delete":
				d := s == "1" || strings.EqualFold(s, "true") || strings.EqualFold(s, "delete")
				in.Delete = &d
			}
		}
		op, berr := orgmanager.BatchItem(len(ops)+len(errs), in)
		if berr != nil {
			re := rowError{Line: line, Msg: berr.Error}
			if berr.CIDR != nil {
				re.CIDR = *berr.CIDR
			}
			errs = append(errs, re)
			continue
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 && len(errs) == 0 {
		return nil, nil, errors.New("no rows to import")
	}
	return ops, errs, nil
}

// scopeKinds are the settings scopes a form offers, least specific first.
var scopeKinds = []string{"org", "profile", "location", "username", "deviceid"}

// parseScopeForm reads a scope (kind and value) through the settings
// endpoints' own rule.
func parseScopeForm(v url.Values) (settings.Scope, fieldErrors) {
	kind := v.Get("scope")
	if kind == "" || kind == "org" {
		sc, _ := orgmanager.ScopeOf("", "")
		return sc, nil
	}
	sc, err := orgmanager.ScopeOf(kind, v.Get("value"))
	if err != nil {
		return sc, fieldErrors{"value": err.Error()}
	}
	return sc, nil
}

// scopeForm is a scope as the form shows it.
func scopeForm(sc settings.Scope) (kind, value string) {
	switch sc.Kind {
	case settings.ScopeProfile:
		return "profile", fmt.Sprint(sc.Profile)
	case settings.ScopeLocation:
		return "location", sc.Value
	case settings.ScopeUsername:
		return "username", sc.Value
	case settings.ScopeDeviceID:
		return "deviceid", sc.Value
	}
	return "org", ""
}

// parseSettingsForm reads the settings form: a scope and a document
// (JSON), through the REST API's parser.
func parseSettingsForm(v url.Values) (settings.Scope, *settings.Document, fieldErrors) {
	sc, errs := parseScopeForm(v)
	if errs != nil {
		return sc, nil, errs
	}
	doc := strings.TrimSpace(v.Get("document"))
	if doc == "" {
		return sc, nil, fieldErrors{"document": "enter a settings document (JSON), {} for an empty one"}
	}
	d, err := orgmanager.ParseDocument([]byte(doc))
	if err != nil {
		return sc, nil, fieldErrors{"document": err.Error()}
	}
	return sc, d, nil
}

// parseSubscriber reads the effective view's subscriber.
func parseSubscriber(v url.Values) orgmanager.Subscriber {
	return orgmanager.Subscriber{Location: v.Get("location"), Username: v.Get("username"),
		DeviceID: v.Get("deviceid"), Profile: strings.TrimSpace(v.Get("profile"))}
}

// parseWhyForm turns the "why" form into the simulator's simulate
// parameters. The device id is typed as an override holds it (mac:0a1b);
// the simulator takes it hex-encoded.
func parseWhyForm(v url.Values) (url.Values, fieldErrors) {
	domain := strings.TrimSpace(v.Get("domain"))
	if domain == "" {
		return nil, fieldErrors{"domain": "enter a domain name"}
	}
	p := url.Values{"domain": {domain}}
	for _, name := range []string{"ip", "username", "profile"} {
		if s := strings.TrimSpace(v.Get(name)); s != "" {
			p.Set(name, s)
		}
	}
	if d := v.Get("deviceid"); d != "" {
		p.Set("deviceid", hex.EncodeToString([]byte(d)))
	}
	if p.Get("ip") == "" && p.Get("username") == "" && p.Get("deviceid") == "" {
		return nil, fieldErrors{"ip": "name the subscriber: an IP address, a username or a device id"}
	}
	p.Set("verbose", "1")
	return p, nil
}

// parseTokenForm reads the new-token form; the role and scope rules are the
// token store's.
func parseTokenForm(v url.Values) (access.NewToken, fieldErrors) {
	var t access.NewToken
	role, err := access.ParseRole(v.Get("role"))
	if err != nil {
		return t, fieldErrors{"role": err.Error()}
	}
	t.Role, t.Org, t.Name = role, strings.TrimSpace(v.Get("org")), strings.TrimSpace(v.Get("name"))
	if role.Scoped() && t.Org == "" {
		return t, fieldErrors{"org": "a scoped role needs an organisation"}
	}
	if !role.Scoped() && t.Org != "" {
		return t, fieldErrors{"org": "an admin token has no organisation"}
	}
	if e := strings.TrimSpace(v.Get("expires")); e != "" {
		d, err := time.ParseDuration(e)
		if err != nil || d <= 0 {
			return t, fieldErrors{"expires": "expires is a positive Go duration such as 720h, or empty for never"}
		}
		t.Expires = d
	}
	return t, nil
}
