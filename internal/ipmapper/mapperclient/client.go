// Package mapperclient is the IP Mapper as its callers see it: the Client
// that speaks the NATS micro service "ipmapper" (its subjects and bodies are
// package wire, shared with the server; they carry the sessions bucket, so a
// Client reaches only the IP Mapper of its bucket), and the Publisher that turns the
// orgmanager's deploy diffs into its requests. Data flows
//
//	orgmanager's deploy → mapperclient → NATS → IP Mapper (internal/ipmapper) → KV "sessions"
//
// It depends on nothing of the server, nor the server on it. The format, merge rules and clean modes are
// documented in docs/ipmapper.md.
package mapperclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/session"
)

// ErrUnavailable means no IP Mapper is listening (NATS "no responders").
var ErrUnavailable = errors.New("ipmapper: no IP Mapper is answering")

// RemoteError is an error reply from the IP Mapper. Code 400 means the
// request was refused (retrying it unchanged will not help); 500 means the
// IP Mapper failed, e.g. a KV write, and a retry may succeed.
type RemoteError struct {
	Code    int
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("ipmapper: %d: %s", e.Code, e.Message)
}

// BatchError reports the items of SetSessionBatch that were not stored.
// Items holds the first of them (Index is the position in the caller's
// slice); Failed counts all of them.
type BatchError struct {
	Stored int
	Failed int
	Items  []wire.ItemError
}

func (e *BatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ipmapper: %d of %d sessions not stored", e.Failed, e.Failed+e.Stored)
	for i, it := range e.Items {
		if i == 3 {
			fmt.Fprintf(&b, "; …")
			break
		}
		fmt.Fprintf(&b, "; [%d] %s", it.Index, it.Error)
	}
	return b.String()
}

// maxClientItemErrors bounds BatchError.Items.
const maxClientItemErrors = 1000

// ClientConfig configures a Client.
type ClientConfig struct {
	Conn *nats.Conn
	// Bucket is the sessions bucket whose IP Mapper the Client calls (its
	// subjects are "ipmapper.<Bucket>.<command>"); default session.Bucket.
	// It must be the bucket the nodes follow: another bucket's IP Mapper
	// on the same NATS would store the sessions where no node reads them.
	Bucket string
	// Timeout per request when ctx has no deadline; default 10s.
	Timeout time.Duration
}

// Client calls the IP Mapper over NATS. It is safe for concurrent use.
type Client struct {
	nc       *nats.Conn
	timeout  time.Duration
	subjects [4]string // set-session, set-session-batch, get-sessions, clean-sessions
}

// Indexes of Client.subjects.
const (
	subjSet = iota
	subjSetBatch
	subjGet
	subjClean
)

// NewClient returns a Client on cfg.Conn.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Conn == nil {
		return nil, errors.New("ipmapper: Conn is required")
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("ipmapper: Timeout must not be negative")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Bucket == "" {
		cfg.Bucket = session.Bucket
	}
	if err := wire.ValidBucket(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("ipmapper: %w", err)
	}
	c := &Client{nc: cfg.Conn, timeout: cfg.Timeout}
	for i, cmd := range []string{wire.CmdSetSession, wire.CmdSetSessionBatch, wire.CmdGetSessions, wire.CmdCleanSessions} {
		c.subjects[i] = wire.Subject(cfg.Bucket, cmd)
	}
	return c, nil
}

// Query selects sessions for GetSessions: set exactly one field.
type Query struct {
	ID       string
	IP       netip.Addr
	Org      string
	Username string
	DeviceID string
}

// CleanRequest selects sessions for CleanSessions; set exactly one of All,
// RevisionBelow, Subnets, IDs. All, RevisionBelow and Subnets need Org; with
// IDs, Org is optional and, when set, every listed session must be in it.
// An empty selector is an error, never "remove everything": removing a whole
// organisation takes All.
type CleanRequest struct {
	Org           string
	All           bool
	RevisionBelow int64
	Subnets       []netip.Prefix
	IDs           []string
	// Producer: only that producer's sessions ("" for the orgmanager's).
	Producer string
}

// SetSession merges s into the stored session with the same id and returns
// the result. ttl > 0 sets the expiry to now+ttl (whole seconds, rounded
// up); 0 keeps the stored expiry; < 0 removes it.
func (c *Client) SetSession(ctx context.Context, s session.Session, ttl time.Duration) (session.Session, error) {
	body, err := json.Marshal(wire.SetSessionRequest{Session: s, TTLSeconds: ttlSeconds(ttl)})
	if err != nil {
		return session.Session{}, fmt.Errorf("ipmapper: encode request: %w", err)
	}
	var reply wire.SetSessionReply
	if err := c.call(ctx, c.subjects[subjSet], body, &reply); err != nil {
		return session.Session{}, err
	}
	return reply.Session, nil
}

func ttlSeconds(ttl time.Duration) int64 {
	switch {
	case ttl < 0:
		return -1
	case ttl == 0:
		return 0
	}
	return int64((ttl + time.Second - 1) / time.Second)
}

// SetSessionBatch merges every session like SetSession (without touching
// expiry), split into as many requests as the connection's maximum payload
// needs. It returns how many were stored and, when any was not, a
// *BatchError; a transport or request-level failure stops it with that
// error and the count so far.
func (c *Client) SetSessionBatch(ctx context.Context, sessions []session.Session) (int, error) {
	return c.SetSessionBatchTTL(ctx, sessions, 0)
}

// SetSessionBatchTTL is SetSessionBatch with SetSession's ttl for every item.
func (c *Client) SetSessionBatchTTL(ctx context.Context, sessions []session.Session, ttl time.Duration) (int, error) {
	if len(sessions) == 0 {
		return 0, nil
	}
	items := make([][]byte, len(sessions))
	for i := range sessions {
		b, err := json.Marshal(&sessions[i])
		if err != nil {
			return 0, fmt.Errorf("ipmapper: encode session %d: %w", i, err)
		}
		items[i] = b
	}
	head := []byte(`{"sessions":[`)
	tail := []byte(`]}`)
	if secs := ttlSeconds(ttl); secs != 0 {
		tail = []byte(`],"ttl_seconds":` + strconv.FormatInt(secs, 10) + `}`)
	}
	berr := &BatchError{}
	addErr := func(e wire.ItemError) {
		berr.Failed++
		if len(berr.Items) < maxClientItemErrors {
			berr.Items = append(berr.Items, e)
		}
	}
	chunks := pack(items, c.budget()-len(head)-len(tail))
	for _, ch := range chunks {
		if ch.tooBig {
			addErr(wire.ItemError{Index: ch.start, ID: sessions[ch.start].ID,
				Error: fmt.Sprintf("session is %d bytes, more than one NATS message can carry", len(items[ch.start]))})
			continue
		}
		body := joinJSON(head, items[ch.start:ch.end], tail)
		var reply wire.SetSessionBatchReply
		if err := c.call(ctx, c.subjects[subjSetBatch], body, &reply); err != nil {
			return berr.Stored, err
		}
		berr.Stored += reply.Stored
		for _, e := range reply.Errors {
			e.Index += ch.start
			addErr(e)
		}
		// Items the server counted as failed but did not list.
		if extra := reply.Failed - len(reply.Errors); extra > 0 {
			berr.Failed += extra
		}
	}
	if berr.Failed > 0 {
		return berr.Stored, berr
	}
	return berr.Stored, nil
}

// GetSessions returns the sessions q selects, in id order, following the
// server's pages until the last.
func (c *Client) GetSessions(ctx context.Context, q Query) ([]session.Session, error) {
	req := wire.GetSessionsRequest{ID: q.ID, Org: q.Org, Username: q.Username, DeviceID: q.DeviceID}
	if q.IP.IsValid() {
		req.IP = q.IP.String()
	}
	var out []session.Session
	for {
		body, err := json.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("ipmapper: encode request: %w", err)
		}
		var reply wire.GetSessionsReply
		if err := c.call(ctx, c.subjects[subjGet], body, &reply); err != nil {
			return nil, err
		}
		out = append(out, reply.Sessions...)
		if reply.Next == "" {
			if out == nil {
				out = []session.Session{}
			}
			return out, nil
		}
		if reply.Next <= req.After {
			return nil, fmt.Errorf("ipmapper: get-sessions paging did not advance past %q", req.After)
		}
		req.After = reply.Next
	}
}

// CleanSessions removes the sessions r selects and returns how many. Long
// IDs or Subnets lists are split over several requests; the count is their
// sum, and on an error it is what was removed before it.
func (c *Client) CleanSessions(ctx context.Context, r CleanRequest) (int, error) {
	// Checked here too so that splitting never turns an invalid request
	// into valid pieces, nor an empty list into "absent".
	req := wire.CleanSessionsRequest(r)
	probe := req
	probe.Subnets = slices.Clone(r.Subnets) // Mode masks in place
	if _, err := probe.Mode(); err != nil {
		return 0, fmt.Errorf("ipmapper: %w", err)
	}
	var listKey string
	var items [][]byte
	switch {
	case len(r.IDs) > 0:
		listKey = "ids"
		req.IDs = nil
		for _, id := range r.IDs {
			b, _ := json.Marshal(id)
			items = append(items, b)
		}
	case len(r.Subnets) > 0:
		listKey = "subnets"
		req.Subnets = nil
		for _, p := range r.Subnets {
			b, _ := json.Marshal(p)
			items = append(items, b)
		}
	default:
		body, err := json.Marshal(req)
		if err != nil {
			return 0, fmt.Errorf("ipmapper: encode request: %w", err)
		}
		var reply wire.CleanSessionsReply
		if err := c.call(ctx, c.subjects[subjClean], body, &reply); err != nil {
			return 0, err
		}
		return reply.Removed, nil
	}
	// The rest of the request, with the list spliced in at the end.
	rest, err := json.Marshal(req)
	if err != nil {
		return 0, fmt.Errorf("ipmapper: encode request: %w", err)
	}
	head := append([]byte(nil), rest[:len(rest)-1]...)
	if len(head) > 1 {
		head = append(head, ',')
	}
	head = append(head, `"`+listKey+`":[`...)
	tail := []byte(`]}`)
	removed := 0
	for _, ch := range pack(items, c.budget()-len(head)-len(tail)) {
		if ch.tooBig {
			return removed, fmt.Errorf("ipmapper: %s[%d] does not fit in a NATS message", listKey, ch.start)
		}
		var reply wire.CleanSessionsReply
		if err := c.call(ctx, c.subjects[subjClean], joinJSON(head, items[ch.start:ch.end], tail), &reply); err != nil {
			return removed, err
		}
		removed += reply.Removed
	}
	return removed, nil
}

// requestOverhead is kept free in a request for the headers NATS adds.
const requestOverhead = 512

func (c *Client) budget() int { return int(c.nc.MaxPayload()) - requestOverhead }

// chunk is items[start:end] of one request; tooBig marks a single item that
// cannot fit at all.
type chunk struct {
	start, end int
	tooBig     bool
}

// pack groups JSON array elements, in order, into chunks whose comma-joined
// length stays within budget.
func pack(items [][]byte, budget int) []chunk {
	var out []chunk
	start, size := 0, 0
	for i, it := range items {
		if len(it) > budget {
			if i > start {
				out = append(out, chunk{start: start, end: i})
			}
			out = append(out, chunk{start: i, end: i + 1, tooBig: true})
			start, size = i+1, 0
			continue
		}
		add := len(it)
		if i > start {
			add++ // comma
		}
		if size+add > budget {
			out = append(out, chunk{start: start, end: i})
			start, size, add = i, 0, len(it)
		}
		size += add
	}
	if start < len(items) {
		out = append(out, chunk{start: start, end: len(items)})
	}
	return out
}

func joinJSON(head []byte, items [][]byte, tail []byte) []byte {
	n := len(head) + len(tail) + len(items)
	for _, it := range items {
		n += len(it)
	}
	b := make([]byte, 0, n)
	b = append(b, head...)
	b = append(b, bytes.Join(items, []byte(","))...)
	return append(b, tail...)
}

// call sends one request and decodes the reply into out, turning error
// replies into *RemoteError.
func (c *Client) call(ctx context.Context, subject string, body []byte, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	msg, err := c.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("%w (%s)", ErrUnavailable, subject)
		}
		return fmt.Errorf("ipmapper: %s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		re := &RemoteError{Message: msg.Header.Get(micro.ErrorHeader)}
		re.Code, _ = strconv.Atoi(code)
		var eb wire.ErrorReply
		if json.Unmarshal(msg.Data, &eb) == nil && eb.Error != "" {
			re.Message = eb.Error
		}
		return re
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("ipmapper: %s: decode reply: %w", subject, err)
	}
	return nil
}
