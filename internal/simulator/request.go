package simulator

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// BadRequest is a parameter the simulator refuses: a 400 {"error": …}
// over HTTP, {"error": …, "status": 400} over NATS. A built-in raises it
// when a script hands it a bad request table too, so a script cannot turn
// bad input into a 500.
type BadRequest struct{ Msg string }

func (e *BadRequest) Error() string { return e.Msg }

func badf(format string, a ...any) error { return &BadRequest{Msg: fmt.Sprintf(format, a...)} }

// Limits on parameters that are passed on as text.
const (
	maxPathLen  = 2048
	maxVHostLen = 255
)

// Request is a domain lookup or a simulation, its parameters validated and
// normalised (docs/simulator.md, Parameters).
type Request struct {
	Domain string // IDNA A-label, lower case, no trailing dot
	Path   string // "" or starting with '/'
	// Simulation only:
	IP       netip.Addr
	Username string
	DeviceID string // decoded from hex: an override's prefix:value form
	// ClientID is an encrypted DNS client's client id (client_id): the
	// resolver finds the session with the device id clientid:<id> before
	// the address, and so does the simulator (EffectiveDeviceID).
	ClientID   string
	Profile    int
	HasProfile bool
	Settings   *settings.Document
	// SettingsJSON is the settings parameter as given (passed to scripts).
	SettingsJSON string
	RulesIP      netip.Addr
	Chain        []string // the cname parameter (parseChain)
	Verbose      bool
	VHost        string
}

// parameter names of the simulator API.
var (
	lookupParams   = []string{"domain", "path"}
	simulateParams = []string{"domain", "path", "ip", "username", "deviceid", "client_id", "profile", "settings", "rules_ip", "cname", "verbose",
		"vhost"}
)

// ParseLookup validates the parameters of GET /api/v1/domain.
func ParseLookup(q url.Values) (*Request, error) { return parse(q, lookupParams) }

// ParseSimulate validates the parameters of /api/v1/simulate.
func ParseSimulate(q url.Values) (*Request, error) { return parse(q, simulateParams) }

// parse reads the known parameters; each may appear once. Parameters it
// does not know are ignored: a proxy delegating to simulate may send its
// own.
func parse(q url.Values, known []string) (*Request, error) {
	get := func(name string) (string, error) {
		vs := q[name]
		switch len(vs) {
		case 0:
			return "", nil
		case 1:
			if !utf8.ValidString(vs[0]) {
				return "", badf("%s is not valid UTF-8", name)
			}
			return vs[0], nil
		}
		return "", badf("%s is given %d times; give it once", name, len(vs))
	}
	r := &Request{}
	for _, name := range known {
		v, err := get(name)
		if err != nil {
			return nil, err
		}
		if err := r.set(name, v); err != nil {
			return nil, err
		}
	}
	if r.Domain == "" {
		return nil, badf("domain is required")
	}
	if err := r.checkClientID(); err != nil {
		return nil, err
	}
	return r, nil
}

// clientIDDevicePrefix is the device id prefix a client id stands for
// (the resolver's ClientIDDevicePrefix: client id kid1 is the session
// with deviceid clientid:kid1).
const clientIDDevicePrefix = "clientid:"

// checkClientID refuses a client id beside a device id: both name the
// device, and the answer would depend on which one won.
func (r *Request) checkClientID() error {
	if r.ClientID != "" && r.DeviceID != "" {
		return badf("give deviceid or client_id, not both")
	}
	return nil
}

// EffectiveDeviceID is the device id the engine resolves first: the
// deviceid parameter, or clientid:<client_id>. A client id that matches no
// session falls back to ip, as in the resolver.
func (r *Request) EffectiveDeviceID() string {
	if r.ClientID != "" {
		return clientIDDevicePrefix + r.ClientID
	}
	return r.DeviceID
}

// validClientID is the resolver's rule for a client id (it travels in a
// DoH path and a TLS server name label): 1–63 characters of a-z, 0-9 and
// -, upper case folded to lower. Kept here, not imported, so that the
// simulator does not depend on the DNS server.
func validClientID(id string) (string, bool) {
	if len(id) == 0 || len(id) > 63 {
		return "", false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return "", false
		}
	}
	return strings.ToLower(id), true
}

// set parses one parameter into r; "" leaves it unset.
func (r *Request) set(name, v string) error {
	if v == "" {
		return nil
	}
	var err error
	switch name {
	case "domain":
		r.Domain, err = feed.NormalizeName(v)
		if err != nil {
			return badf("domain: %v", err)
		}
	case "path":
		if len(v) > maxPathLen {
			return badf("path is longer than %d bytes", maxPathLen)
		}
		if strings.ContainsFunc(v, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			return badf("path contains a control character")
		}
		if !strings.HasPrefix(v, "/") {
			v = "/" + v
		}
		r.Path = v
	case "ip":
		if r.IP, err = parseAddr(name, v); err != nil {
			return err
		}
	case "rules_ip":
		if r.RulesIP, err = parseAddr(name, v); err != nil {
			return err
		}
	case "cname":
		if r.Chain, err = parseChain(v); err != nil {
			return err
		}
	case "username":
		if err := (identity.Attributes{Username: v}).Validate(); err != nil {
			return badf("%v", err)
		}
		r.Username = v
	case "deviceid":
		b, err := hex.DecodeString(v)
		if err != nil {
			return badf("deviceid must be hex-encoded: %v", err)
		}
		if err := (identity.Attributes{DeviceID: string(b)}).Validate(); err != nil {
			return badf("deviceid decodes to an invalid device id: %v", err)
		}
		r.DeviceID = string(b)
	case "client_id":
		id, ok := validClientID(v)
		if !ok {
			return badf("client_id %q: want 1-63 characters of a-z, 0-9 and -", v)
		}
		r.ClientID = id
	case "profile":
		p, err := settings.ParseProfile(v)
		if err != nil {
			return badf("profile: %v", err)
		}
		r.Profile, r.HasProfile = p, true
	case "settings":
		d, err := settings.Parse([]byte(v))
		if err != nil {
			var fe *settings.FieldError
			if errors.As(err, &fe) {
				return badf("settings.%s", err)
			}
			return badf("settings: %v", err)
		}
		r.Settings, r.SettingsJSON = d, v
	case "verbose":
		// 1/0 over HTTP; true/false too, as a script's boolean reads back
		// (FromTable) and as a JSON payload may give it.
		switch v {
		case "1", "true":
			r.Verbose = true
		case "0", "false":
		default:
			return badf("verbose must be 1, true, 0 or false, not %q", v)
		}
	case "vhost":
		if len(v) > maxVHostLen {
			return badf("vhost is longer than %d bytes", maxVHostLen)
		}
		r.VHost = v
	}
	return nil
}

func parseAddr(name, v string) (netip.Addr, error) {
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, badf("%s %q is not an IP address", name, v)
	}
	return a.Unmap(), nil
}

// Table is the request as a script sees it: the API's parameter names with
// their normalised values (domain in A-label form, deviceid decoded, profile
// a number, verbose a boolean; absent parameters left out).
func (r *Request) Table() map[string]any {
	// Room for 8 keys, more than a request usually has: a map of at most
	// 8 is one group, half the bytes and allocations of a larger one.
	t := make(map[string]any, 8)
	t["domain"] = r.Domain
	put := func(k, v string) {
		if v != "" {
			t[k] = v
		}
	}
	put("path", r.Path)
	if r.IP.IsValid() {
		t["ip"] = r.IP.String()
	}
	put("username", r.Username)
	put("deviceid", r.DeviceID)
	put("client_id", r.ClientID)
	if r.HasProfile {
		t["profile"] = r.Profile
	}
	put("settings", r.SettingsJSON)
	if r.RulesIP.IsValid() {
		t["rules_ip"] = r.RulesIP.String()
	}
	put("cname", strings.Join(r.Chain, ","))
	if r.Verbose {
		t["verbose"] = true
	}
	put("vhost", r.VHost)
	return t
}

// FromTable reads a request table back (what a script hands a built-in):
// the same validation as the HTTP parameters, except that deviceid is
// already decoded and profile and verbose may be a number and a boolean.
func FromTable(t map[string]any) (*Request, error) {
	r := &Request{}
	for k, v := range t {
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case bool:
			s = strconv.FormatBool(x)
		case int64:
			s = strconv.FormatInt(x, 10)
		case float64:
			s = strconv.FormatFloat(x, 'f', -1, 64)
		case int:
			s = strconv.Itoa(x)
		case nil:
			continue
		default:
			return nil, badf("request field %s has type %T; want a string, number or boolean", k, v)
		}
		if k == "deviceid" {
			if err := (identity.Attributes{DeviceID: s}).Validate(); err != nil {
				return nil, badf("deviceid: %v", err)
			}
			r.DeviceID = s
			continue
		}
		if err := r.set(k, s); err != nil {
			return nil, err
		}
	}
	if r.Domain == "" {
		return nil, badf("domain is required")
	}
	if err := r.checkClientID(); err != nil {
		return nil, err
	}
	return r, nil
}
