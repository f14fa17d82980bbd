package activity_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
)

func sampleBatch() activity.Batch {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 123, time.UTC)
	return activity.Batch{Node: "node-a", Boot: 0xdeadbeef, Seq: 7,
		Events: []activity.Event{
			{Time: t0, Node: "node-a", Org: "acme", SessionID: "s1", Username: "alice", DeviceID: "d1", Location: "hq",
				Client: "192.0.2.7", QName: "bad.test.", QType: 1, Transport: "udp", Verdict: "block", Action: "nxdomain",
				Reason: "category", Rule: "category:3 feed=threats key=bad.test", Categories: []uint16{3, 65535}, Rcode: 3,
				Cached: "packet", LatencyUS: 42, Policy: "0123456789abcdef"},
			{Time: t0, QName: "ok.test.", Verdict: "allow", Action: "allow", Reason: "default", Rcode: -1, Sampled: true},
		},
		Counts: []activity.Count{{Start: t0.Truncate(time.Minute), Seconds: 60, Org: "acme", SessionID: "s1", Reason: "default",
			Category: 0, N: 1 << 40}},
	}
}

// TestBatchRoundTrip: a batch reads back as written.
func TestBatchRoundTrip(t *testing.T) {
	b := sampleBatch()
	got, err := activity.ParseBatch(activity.AppendBatch(nil, &b))
	if err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, b)
	}
	if id := b.ID(); id != "node-a/deadbeef/7" {
		t.Errorf("ID %q", id)
	}
	empty := activity.Batch{Node: "n", Seq: 1}
	if got, err := activity.ParseBatch(activity.AppendBatch(nil, &empty)); err != nil || !reflect.DeepEqual(got, empty) {
		t.Errorf("empty batch read back as %+v, %v", got, err)
	}
}

// TestParseBatchRefuses: a cut, padded or foreign message is ErrBadBatch.
func TestParseBatchRefuses(t *testing.T) {
	b := sampleBatch()
	enc := activity.AppendBatch(nil, &b)
	for name, data := range map[string][]byte{
		"empty": nil, "magic only": enc[:4], "cut": enc[:len(enc)-1], "padded": append(append([]byte{}, enc...), 0),
		"other version": append([]byte{'S', 'P', 'A', 2}, enc[4:]...),
		"huge count":    {'S', 'P', 'A', 1, 0, 0, 0, 0xff, 0xff, 0x03},
	} {
		if _, err := activity.ParseBatch(data); !errors.Is(err, activity.ErrBadBatch) {
			t.Errorf("%s: %v, want ErrBadBatch", name, err)
		}
	}
}

// FuzzParseBatch: any bytes parse or are refused, never a panic; what
// parses encodes again to bytes that parse the same.
func FuzzParseBatch(f *testing.F) {
	b := sampleBatch()
	f.Add(activity.AppendBatch(nil, &b))
	f.Add([]byte("SPA\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := activity.ParseBatch(data)
		if err != nil {
			return
		}
		again, err := activity.ParseBatch(activity.AppendBatch(nil, &b))
		if err != nil || !reflect.DeepEqual(again, b) {
			t.Fatalf("%+v encoded again read as %+v, %v", b, again, err)
		}
	})
}

// TestCursor: a cursor reads back; other strings are ErrBadCursor.
func TestCursor(t *testing.T) {
	c := activity.Cursor{Time: time.Date(2026, 11, 28, 1, 2, 3, 4, time.UTC), ID: 99}
	if got, err := activity.ParseCursor(c.String()); err != nil || !got.Time.Equal(c.Time) || got.ID != c.ID {
		t.Errorf("%v read back as %v, %v", c, got, err)
	}
	for _, s := range []string{"", "x", "AAAA", c.String() + "A", "________________________"} {
		if _, err := activity.ParseCursor(s); !errors.Is(err, activity.ErrBadCursor) {
			t.Errorf("%q: %v, want ErrBadCursor", s, err)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	f.Add(activity.Cursor{Time: time.Unix(1, 2), ID: 3}.String())
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := activity.ParseCursor(s)
		if err != nil {
			return
		}
		if again, err := activity.ParseCursor(c.String()); err != nil || !again.Time.Equal(c.Time) || again.ID != c.ID {
			t.Fatalf("%q: %v read again as %v, %v", s, c, again, err)
		}
	})
}

// TestConfig: the defaults validate; each bad key is named.
func TestConfig(t *testing.T) {
	c := activity.DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for key, mod := range map[string]func(*activity.Config){
		"sample_allowed": func(c *activity.Config) { c.SampleAllowed = -1 },
		"client_ip":      func(c *activity.Config) { c.ClientIP = "half" },
		"count_interval": func(c *activity.Config) { c.CountInterval = 7 * time.Minute },
		"queue":          func(c *activity.Config) { c.Queue = 0 },
		"retention":      func(c *activity.Config) { c.Retention = time.Minute },
		"store.url":      func(c *activity.Config) { c.Store.URL = "mysql://x" },
		"dnstap.socket":  func(c *activity.Config) { c.DNSTap.Socket = "/tmp/x" },
		"stream":         func(c *activity.Config) { c.Stream.MaxBytes = 0 },
	} {
		c := activity.DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil || !contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming it", key, err)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestAppendBatchEncoded: a batch of events encoded one by one (as a
// node's observer does) is the same bytes as AppendBatch's.
func TestAppendBatchEncoded(t *testing.T) {
	b := sampleBatch()
	var evs []byte
	for i := range b.Events {
		evs = activity.AppendEvent(evs, &b.Events[i])
	}
	want := activity.AppendBatch(nil, &b)
	noEvents := b
	noEvents.Events = nil
	if got := activity.AppendBatchEncoded(nil, &noEvents, len(b.Events), evs); string(got) != string(want) {
		t.Fatalf("AppendBatchEncoded differs from AppendBatch:\n%x\n%x", got, want)
	}
}
