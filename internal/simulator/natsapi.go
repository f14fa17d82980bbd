package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// The simulator's NATS micro service (docs/simulator.md "NATS"): the same
// four calls as the HTTP API, on subjects svcpf.simulator.<endpoint>.
const (
	NATSServiceName = "simulator"
	NATSGroup       = "svcpf.simulator"
	NATSDomain      = "domain"
	NATSSimulate    = "simulate"
	NATSCodeMaps    = "codemappings"
	NATSInfo        = "info"
)

// NATSConfig configures ServeNATS.
type NATSConfig struct {
	Conn *nats.Conn
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
}

// ServeNATS registers the micro service on cfg.Conn; it answers until the
// returned stop is called. A request's payload is a JSON object of the
// HTTP API's parameters (string values; an empty payload is {}); the reply
// is the HTTP API's body, or an error reply with the status code in the
// Nats-Service-Error-Code header and {"error": …} as the body. The API key
// is the request's X-API-Key header, checked as over HTTP.
func (s *Service) ServeNATS(cfg NATSConfig) (stop func() error, err error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("simulator: NATS connection is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	svc, err := micro.AddService(cfg.Conn, micro.Config{
		Name: NATSServiceName, Version: "1.0.0",
		Description: "svc-pf simulator API over NATS",
	})
	if err != nil {
		return nil, fmt.Errorf("simulator: add micro service: %w", err)
	}
	g := svc.AddGroup(NATSGroup)
	for _, ep := range []struct {
		name, call string
		keyed      bool
		parse      func(url.Values) (*Request, error)
	}{
		{NATSDomain, CallLookupDomain, true, ParseLookup},
		{NATSSimulate, CallSimulateUser, true, ParseSimulate},
		{NATSCodeMaps, CallCodeMappings, true, nil},
		{NATSInfo, CallInfo, false, nil},
	} {
		h := func(req micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
			defer cancel()
			body, code, err := s.natsCall(ctx, req, ep.call, ep.keyed, ep.parse)
			if err != nil {
				if code == 500 { // as over HTTP: the operator's log says why
					s.log.Warn("simulator call failed", "subject", req.Subject(), "err", err)
				}
				eb, _ := json.Marshal(map[string]string{"error": err.Error()})
				_ = req.Error(strconv.Itoa(code), oneLine(err.Error()), eb)
				return
			}
			_ = req.Respond(body)
		}
		if err := g.AddEndpoint(ep.name, micro.HandlerFunc(h)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("simulator: add endpoint %s: %w", ep.name, err)
		}
	}
	if err := cfg.Conn.FlushTimeout(cfg.Timeout); err != nil {
		_ = svc.Stop()
		// nats.go says "timeout" when the server cannot be reached: name
		// the server too.
		if nc := natsbus.NotConnected(cfg.Conn); nc != nil {
			err = fmt.Errorf("%w: %w", nc, err)
		}
		return nil, fmt.Errorf("simulator: register the NATS API: %w", err)
	}
	return svc.Stop, nil
}

// natsCall answers one request: its body, or an error with its status.
func (s *Service) natsCall(ctx context.Context, req micro.Request, call string, keyed bool,
	parse func(url.Values) (*Request, error)) ([]byte, int, error) {
	if keyed && len(s.cfg.APIKeys) > 0 && !s.knownKey(req.Headers().Get("X-API-Key")) {
		return nil, 401, fmt.Errorf("missing or unknown X-API-Key")
	}
	var v any
	var err error
	switch {
	case call == CallInfo:
		return *s.info.Load(), 0, nil
	case parse == nil:
		v, err = s.pool.Call(ctx, call, nil)
	default:
		params, perr := natsParams(req.Data())
		if perr != nil {
			return nil, 400, perr
		}
		r, perr := parse(params)
		if perr != nil {
			return nil, 400, perr
		}
		v, err = s.Do(ctx, call, r)
	}
	if err != nil {
		code, msg := Status(err)
		if code == 0 {
			code = 500
		}
		return nil, code, fmt.Errorf("%s", msg)
	}
	if call == CallCodeMappings && isEmpty(v) {
		return nil, 204, fmt.Errorf("no feed codes loaded")
	}
	// The same bytes as over HTTP (jsonbody.go), without the newline.
	if b, err := AppendBody(nil, call, v); err == nil {
		return b, 0, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, 500, s.unencodable(call, err)
	}
	return b, 0, nil
}

// natsParams reads a request payload: a JSON object whose values are
// strings (numbers and booleans are accepted and written as the HTTP API
// would take them).
func natsParams(data []byte) (url.Values, error) {
	params := url.Values{}
	if len(strings.TrimSpace(string(data))) == 0 {
		return params, nil
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, badf("the request must be a JSON object of parameters: %v", err)
	}
	for k, v := range m {
		switch x := v.(type) {
		case string:
			params.Set(k, x)
		case float64:
			params.Set(k, strconv.FormatFloat(x, 'f', -1, 64))
		case bool:
			if x {
				params.Set(k, "1")
			} else {
				params.Set(k, "0")
			}
		case nil:
		default:
			if k == "settings" { // a settings document may come as an object
				b, _ := json.Marshal(x)
				params.Set(k, string(b))
				continue
			}
			return nil, badf("parameter %s must be a string, number or boolean", k)
		}
	}
	return params, nil
}

// oneLine makes an error text fit a NATS header value.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 256 {
		s = s[:256]
	}
	return s
}
