package activity

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// What the reports ask of a store, and the bounds every question keeps:
// no list and no range is unbounded.
const (
	// DefaultLimit and MaxLimit bound a page of events.
	DefaultLimit = 100
	MaxLimit     = 1000
	// DefaultTop and MaxTop bound a summary's rows.
	DefaultTop = 10
	MaxTop     = 100
	// MaxRange is the longest from–to a question may span.
	MaxRange = 366 * 24 * time.Hour
	// MaxBuckets bounds a summary's series (Range / Interval).
	MaxBuckets = 1000
)

// EventQuery asks for one organisation's events, newest first.
type EventQuery struct {
	Org string
	// From and To bound the events' time: From ≤ time < To.
	From, To time.Time
	// Filters; empty matches all. IP matches an event's Client: an address
	// matches the address itself and a truncated network holding it, a
	// prefix the addresses and networks inside it, "h:…" the hash itself.
	Username, DeviceID, IP, Verdict, Reason string
	// QName is a name (lower case, final dot): the name and the names
	// under it.
	QName string
	// Limit is the page's size, 1…MaxLimit.
	Limit int
	// After continues a listing: only events older than the cursor (the
	// last event of the previous page).
	After *Cursor
}

// StoredEvent is an event with the id its store gave it, unique within
// the events of one time (Cursor's tie-breaker).
type StoredEvent struct {
	ID int64 `json:"-"`
	Event
}

// EventPage is one page of events and, when more may follow, the cursor
// that continues it.
type EventPage struct {
	Events []StoredEvent
	Next   *Cursor
}

// Cursor is where a page of events ended: its last event's time and id.
type Cursor struct {
	Time time.Time
	ID   int64
}

// String is the cursor as the reports hand it out: opaque, URL-safe.
func (c Cursor) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(c.Time.UnixNano()))
	binary.BigEndian.PutUint64(b[8:], uint64(c.ID))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ErrBadCursor is ParseCursor's error.
var ErrBadCursor = errors.New("cursor: not one this server handed out")

// ParseCursor reads a cursor String wrote.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return Cursor{}, ErrBadCursor
	}
	ns, id := int64(binary.BigEndian.Uint64(b[:8])), int64(binary.BigEndian.Uint64(b[8:]))
	if ns < 0 || id < 0 {
		return Cursor{}, ErrBadCursor
	}
	return Cursor{Time: time.Unix(0, ns).UTC(), ID: id}, nil
}

// Dimension is what a summary counts by.
type Dimension string

// Dimensions.
const (
	ByCategory   Dimension = "category"
	ByDomain     Dimension = "domain"
	BySubscriber Dimension = "subscriber"
	ByReason     Dimension = "reason"
)

// SummaryQuery asks for one organisation's counts over a range.
type SummaryQuery struct {
	Org      string
	From, To time.Time
	By       Dimension
	// Top is how many keys to return, 1…MaxTop, largest count first.
	Top int
	// Interval, when not zero, asks for each row's counts per interval
	// from From (a series, for the console's charts); at most MaxBuckets.
	Interval time.Duration
}

// Summary answers a SummaryQuery. Counts include the plain allows (from
// the Count records) except by domain, which counts stored events only:
// plain allows are not kept per name.
type Summary struct {
	By       Dimension     `json:"by"`
	From     time.Time     `json:"from"`
	To       time.Time     `json:"to"`
	Interval time.Duration `json:"-"`
	// Total and Blocked are over the whole range (Blocked: verdict block
	// or redirect); Other is the count of the keys beyond Top.
	Total   int64        `json:"total"`
	Blocked int64        `json:"blocked"`
	Other   int64        `json:"other"`
	Rows    []SummaryRow `json:"rows"`
}

// SummaryRow is one key's counts. Key is, by category, the category code
// in decimal ("0": none); by domain, the name; by subscriber, the session
// id ("" for the global policy), with the session's Username, DeviceID
// and Location; by reason, the reason.
type SummaryRow struct {
	Key      string  `json:"key"`
	Username string  `json:"username,omitempty"`
	DeviceID string  `json:"deviceid,omitempty"`
	Location string  `json:"location,omitempty"`
	Count    int64   `json:"count"`
	Blocked  int64   `json:"blocked"`
	Series   []int64 `json:"series,omitempty"`
}

// Validate checks the bounds every store relies on.
func (q *EventQuery) Validate() error {
	if err := checkRange(q.From, q.To); err != nil {
		return err
	}
	if q.Limit < 1 || q.Limit > MaxLimit {
		return fmt.Errorf("limit %d is not within 1…%d", q.Limit, MaxLimit)
	}
	if q.Org == "" {
		return errors.New("org is required")
	}
	return nil
}

// Validate checks the bounds every store relies on.
func (q *SummaryQuery) Validate() error {
	if err := checkRange(q.From, q.To); err != nil {
		return err
	}
	switch q.By {
	case ByCategory, ByDomain, BySubscriber, ByReason:
	default:
		return fmt.Errorf("by %q: want category, domain, subscriber or reason", q.By)
	}
	if q.Top < 1 || q.Top > MaxTop {
		return fmt.Errorf("top %d is not within 1…%d", q.Top, MaxTop)
	}
	if q.Interval < 0 || (q.Interval > 0 && (q.Interval < time.Minute || q.To.Sub(q.From)/q.Interval > MaxBuckets)) {
		return fmt.Errorf("interval %v: want at least 1m and at most %d intervals in the range", q.Interval, MaxBuckets)
	}
	if q.Org == "" {
		return errors.New("org is required")
	}
	return nil
}

func checkRange(from, to time.Time) error {
	if from.IsZero() || to.IsZero() || !from.Before(to) {
		return errors.New("from must be before to")
	}
	if to.Sub(from) > MaxRange {
		return fmt.Errorf("from–to spans %v, more than the %v a question may", to.Sub(from), MaxRange)
	}
	return nil
}

// Writer is what the collector needs of a store.
type Writer interface {
	// Write stores a batch's events and counts, all or none, once: a batch
	// written before (by its ID) is not written again, and Write returns
	// nil. It returns only once the batch is durable.
	Write(ctx context.Context, b *Batch) error
	// DropBefore drops every whole day that ends at or before t (UTC
	// days), returning how many it dropped.
	DropBefore(ctx context.Context, t time.Time) (int, error)
}

// Reader is what the reports need of a store.
type Reader interface {
	// Events answers a validated EventQuery.
	Events(ctx context.Context, q EventQuery) (EventPage, error)
	// Summary answers a validated SummaryQuery.
	Summary(ctx context.Context, q SummaryQuery) (Summary, error)
}
