package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/luapool"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// Entry-function names of the Lua contract (docs/simulator.md), also the
// `call` label of the simulator API's metrics.
const (
	CallLookupDomain = "lookup_domain"
	CallSimulateUser = "simulate_user"
	CallCodeMappings = "codemappings"
	CallMaintenance  = "maintenance"
	CallInfo         = "info"
)

// Calls lists the entry functions.
func Calls() []string {
	return []string{CallLookupDomain, CallSimulateUser, CallCodeMappings, CallMaintenance, CallInfo}
}

// ModuleName is the preloaded module exposing the built-ins to scripts.
const ModuleName = "svcpf"

// FeedSet is the node's feeds: *feeds.Client. Set returns the current
// snapshot (never nil once the client is built).
type FeedSet interface {
	Set() *feeds.Set
}

// Sizes sizes the node's read models for the info payload: *node.Node.
type Sizes interface {
	SessionCount() int
	SettingsDocumentCount() int
}

// noSizes counts 0: a simulator without sessions or settings.
type noSizes struct{}

func (noSizes) SessionCount() int          { return 0 }
func (noSizes) SettingsDocumentCount() int { return 0 }

// builtins are the Go implementations behind the svcpf module.
type builtins struct {
	engine  *policy.Engine
	feeds   FeedSet // nil: no feed backend
	sizes   Sizes
	clock   func() time.Time
	region  string
	version string
	// docs are rendered effective documents by compiled policy: the
	// engine shares one *settings.Effective among every session with the
	// same layers, so rendering it once saves the encoding per answer.
	// Bounded: emptied when it holds maxDocs.
	docs    sync.Map // *settings.Effective → json.RawMessage (read only)
	docsLen atomic.Int64
}

// maxDocs bounds builtins.docs: a rendered document is one byte slice (a
// map of it was dozens of small objects for the GC to mark), so the bound
// covers a quarter of the engine's policy cache rather than a sixteenth.
const maxDocs = 16384

// document renders e once, as the JSON the body carries: the body writer
// copies the bytes, and luapool decodes them only for a script that reads
// the settings (a json.RawMessage in a built-in's result). Request settings
// or an explicit profile make a document of one request, rendered without
// keeping it.
func (b *builtins) document(e *settings.Effective, oneOff bool) json.RawMessage {
	if e == nil || oneOff {
		return documentJSON(e)
	}
	if m, ok := b.docs.Load(e); ok {
		return m.(json.RawMessage)
	}
	m := documentJSON(e)
	if b.docsLen.Add(1) > maxDocs {
		b.docs.Clear()
		b.docsLen.Store(1)
	}
	b.docs.Store(e, m)
	return m
}

// module is the svcpf module: each entry function's built-in.
func (b *builtins) module() luapool.Module {
	return luapool.Module{
		CallLookupDomain: func(ctx context.Context, args []any) (any, error) {
			r, err := requestArg(ctx, args)
			if err != nil {
				return nil, err
			}
			return b.lookupDomain(r), nil
		},
		CallSimulateUser: func(ctx context.Context, args []any) (any, error) {
			r, err := requestArg(ctx, args)
			if err != nil {
				return nil, err
			}
			return b.simulateUser(r), nil
		},
		CallCodeMappings: func(context.Context, []any) (any, error) { return b.codeMappings(), nil },
		CallMaintenance:  func(context.Context, []any) (any, error) { return map[string]any{}, nil },
		CallInfo:         func(context.Context, []any) (any, error) { return b.info(), nil },
	}
}

// requestKey is the context key of the request Service.Do hands a call.
type requestKey struct{}

// given is a call's request and the table made of it.
type given struct {
	table map[string]any
	req   *Request
}

// requestArg is the request a script handed a built-in: the call's own
// request when it is the call's table, unchanged (luapool then hands back
// the very map Do made; FromTable of it would give the same request),
// otherwise the table read back and validated.
func requestArg(ctx context.Context, args []any) (*Request, error) {
	if len(args) == 0 {
		return nil, badf("the request table is missing")
	}
	t, ok := args[0].(map[string]any)
	if !ok {
		return nil, badf("the request must be a table of parameters, not %T", args[0])
	}
	if g, ok := ctx.Value(requestKey{}).(*given); ok && sameMap(g.table, t) {
		return g.req, nil
	}
	return FromTable(t)
}

// sameMap reports whether a and b are the same map (not equal contents).
func sameMap(a, b map[string]any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// categories renders categories as the domain and simulate bodies carry
// them: code, title, feed, match.
func categories(cs []feed.Category) []any {
	out := make([]any, 0, len(cs))
	for _, c := range cs {
		out = append(out, map[string]any{"code": int(c.Code), "title": c.Title, "feed": c.Feed, "match": c.Key()})
	}
	return out
}

// lookupDomain is GET /api/v1/domain: the categories of the name, with no
// subscriber context.
func (b *builtins) lookupDomain(r *Request) map[string]any {
	var cs []feed.Category
	if c := b.engine.View().Categories; c != nil {
		cs = c.Lookup(r.Domain, r.Path, nil)
	}
	return map[string]any{"domain": r.Domain, "path": r.Path, "categories": categories(cs)}
}

// simulateUser is /api/v1/simulate: the engine's explained decision, as
// a simulateBody (body.go): its nested parts are rendered when read or
// written out, not built per answer.
func (b *builtins) simulateUser(r *Request) *simulateBody {
	q := policy.Query{
		Input: policy.Input{Domain: r.Domain, Path: r.Path, AnswerAddr: r.RulesIP, Chain: r.Chain, Time: b.clock()},
		IP:    r.IP, Username: r.Username, DeviceID: r.EffectiveDeviceID(),
		Profile: r.Profile, HasProfile: r.HasProfile, Settings: r.Settings,
	}
	body := &simulateBody{domain: r.Domain, path: r.Path}
	body.res = b.engine.Evaluate(&q)
	body.settings = b.document(body.res.Effective, r.Settings != nil || r.HasProfile)
	if r.Verbose {
		body.log = verboseLog(r, &body.res)
	}
	return body
}

// identityFields are the keys of the simulate body's identity
// (docs/simulator.md, Bodies).
var identityFields = [...]string{"by", "ip", "org", "session_id", "username", "deviceid", "location", "profile"}

// verboseLog is the rule evaluation in words (verbose=1).
func verboseLog(r *Request, res *policy.Result) []any {
	var log []any
	add := func(format string, a ...any) { log = append(log, fmt.Sprintf(format, a...)) }
	add("query %s%s at %s", r.Domain, r.Path, res.Subject.IP)
	if r.VHost != "" {
		add("vhost %s", r.VHost)
	}
	for _, st := range res.Steps {
		add("%s: %s", st.Step, st.Result)
	}
	if res.Effective != nil {
		names := settings.PolicyFields()
		fields := make([]string, 0, len(names))
		for _, f := range names {
			fields = append(fields, f+" from "+res.Effective.OriginOf(f))
		}
		add("effective settings: %s", strings.Join(fields, ", "))
	}
	for _, c := range res.Categories {
		add("category %d (%s) from feed %s, key %s", c.Code, c.Title, c.Feed, c.Key())
	}
	for i, st := range res.Trace {
		add("step %d %s: %s", i+1, st.Step, st.Result)
	}
	add("verdict %s, action %s, reason %s, rule %q", res.Verdict, res.Action, res.Reason, res.Rule())
	return log
}

// codeMappings is GET /api/v1/codemappings; nil (204) until a feed with
// codes is loaded or when no feed is configured.
func (b *builtins) codeMappings() any {
	if b.feeds == nil {
		return nil
	}
	codes := b.feeds.Set().Codes()
	if len(codes) == 0 {
		return nil
	}
	out := make([]any, 0, len(codes))
	for _, c := range codes {
		out = append(out, map[string]any{"code": int(c.Code), "title": c.Title, "feed": c.Feed})
	}
	return map[string]any{"codes": out}
}

// info is the info payload (docs/simulator.md, Bodies).
func (b *builtins) info() map[string]any {
	var fs []any
	if b.feeds != nil {
		for _, f := range b.feeds.Set().Feeds() {
			fs = append(fs, map[string]any{"name": f.Name, "version": f.Version, "entries": f.Entries,
				"loaded_at": f.LoadedAt.UTC().Format(time.RFC3339Nano)})
		}
	}
	return map[string]any{"region": b.region, "version": b.version, "feeds": orEmpty(fs),
		"sessions": b.sizes.SessionCount(), "settings_documents": b.sizes.SettingsDocumentCount(),
		"updated_at": b.clock().UTC().Format(time.RFC3339Nano)}
}

// documentJSON is an effective document as a compact JSON object, with
// HTML characters unescaped as httpapi.WriteJSON writes them.
func documentJSON(e *settings.Effective) json.RawMessage {
	if e == nil {
		return json.RawMessage("{}")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&e.Document); err != nil {
		return json.RawMessage("{}") // a document always marshals
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

func orEmpty(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}
