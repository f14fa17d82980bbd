package dnswire_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

func TestParseQueryAccepts(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	// 3×(1+63) + 1+61 + root = 255: the longest legal name.
	maxName := long63 + "." + long63 + "." + long63 + "." + strings.Repeat("b", 61) + "."

	tests := []struct {
		name  string
		pkt   []byte
		check func(t *testing.T, q *dnswire.Query)
	}{
		{
			name: "plain query keeps the client's case and lower-cases the key",
			pkt:  query(t, "WwW.ExAmple.COM.", dns.TypeA),
			check: func(t *testing.T, q *dnswire.Query) {
				if !bytes.Equal(q.Name(), wire("www", "example", "com")) {
					t.Errorf("Name = %q", q.Name())
				}
				if !bytes.Equal(q.RawName(), wire("WwW", "ExAmple", "COM")) {
					t.Errorf("RawName = %q", q.RawName())
				}
				if q.ID != 0xBEEF || q.QType != dns.TypeA || q.QClass != dns.ClassINET {
					t.Errorf("id %x type %d class %d", q.ID, q.QType, q.QClass)
				}
				if !q.Flags.Has(dnswire.FlagRD) || q.Flags.Has(dnswire.FlagCD) {
					t.Errorf("flags %016b", q.Flags)
				}
				if q.EDNS.Present || q.EDNS.MaxUDP() != 512 {
					t.Errorf("EDNS %+v", q.EDNS)
				}
			},
		},
		{
			name: "EDNS with DO",
			pkt:  query(t, "example.com.", dns.TypeAAAA, withEDNS(1232, true)),
			check: func(t *testing.T, q *dnswire.Query) {
				e := q.EDNS
				if !e.Present || e.UDPSize != 1232 || !e.DO || e.Version != 0 || q.BadVersion() {
					t.Errorf("EDNS %+v", e)
				}
				if e.MaxUDP() != 1232 {
					t.Errorf("MaxUDP %d", e.MaxUDP())
				}
			},
		},
		{
			name: "EDNS payload below 512 counts as 512",
			pkt:  query(t, "example.com.", dns.TypeA, withEDNS(100, false)),
			check: func(t *testing.T, q *dnswire.Query) {
				if q.EDNS.UDPSize != 100 || q.EDNS.MaxUDP() != 512 || q.EDNS.DO {
					t.Errorf("EDNS %+v", q.EDNS)
				}
			},
		},
		{
			name: "EDNS version 1 parses and asks for BADVERS",
			pkt: query(t, "example.com.", dns.TypeA, withEDNS(1232, false), func(m *dns.Msg) {
				m.IsEdns0().SetVersion(1)
			}),
			check: func(t *testing.T, q *dnswire.Query) {
				if q.EDNS.Version != 1 || !q.BadVersion() {
					t.Errorf("EDNS %+v", q.EDNS)
				}
			},
		},
		{
			name: "cookie and client subnet are located",
			pkt: query(t, "example.com.", dns.TypeA,
				withOption(&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}),
				withOption(&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24,
					Address: []byte{192, 0, 2, 0}}),
				withOption(&dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1}}),
			),
			check: func(t *testing.T, q *dnswire.Query) {
				e := q.EDNS
				want := dnswire.OptCookie | dnswire.OptECS | dnswire.OptUnknown
				if e.Options != want {
					t.Errorf("Options %b, want %b", e.Options, want)
				}
				if got := q.OptionData(e.Cookie); !bytes.Equal(got, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
					t.Errorf("cookie %x", got)
				}
				if got := q.OptionData(e.ECS); !bytes.Equal(got, []byte{0, 1, 24, 0, 192, 0, 2}) {
					t.Errorf("ECS %x", got)
				}
			},
		},
		{
			name: "CD and AD flags",
			pkt: query(t, "example.com.", dns.TypeA, withFlags(func(m *dns.Msg) {
				m.CheckingDisabled, m.AuthenticatedData, m.RecursionDesired = true, true, false
			})),
			check: func(t *testing.T, q *dnswire.Query) {
				if !q.Flags.Has(dnswire.FlagCD|dnswire.FlagAD) || q.Flags.Has(dnswire.FlagRD) {
					t.Errorf("flags %016b", q.Flags)
				}
			},
		},
		{
			name: "root",
			pkt:  query(t, ".", dns.TypeNS),
			check: func(t *testing.T, q *dnswire.Query) {
				if !bytes.Equal(q.Name(), []byte{0}) || q.QType != dns.TypeNS {
					t.Errorf("name %q type %d", q.Name(), q.QType)
				}
			},
		},
		{
			name: "255-byte name",
			pkt:  query(t, maxName, dns.TypeA),
			check: func(t *testing.T, q *dnswire.Query) {
				if len(q.Name()) != 255 {
					t.Errorf("name length %d", len(q.Name()))
				}
			},
		},
		{
			name: "trailing bytes are ignored",
			pkt:  append(query(t, "example.com.", dns.TypeA), 0xDE, 0xAD),
			check: func(t *testing.T, q *dnswire.Query) {
				if q.Len() != len(q.Question())+dnswire.HeaderLen {
					t.Errorf("Len %d", q.Len())
				}
			},
		},
		{
			name: "a non-OPT additional record with a compressed owner is skipped",
			pkt: cat(header(1, 0x0100, 1, 0, 0, 2),
				wire("example", "com"), []byte{0, 1, 0, 1},
				[]byte{0xC0, 12, 0, 16, 0, 1, 0, 0, 0, 60, 0, 2, 1, 'x'}, // TXT
				[]byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0}),                // OPT
			check: func(t *testing.T, q *dnswire.Query) {
				if !q.EDNS.Present || q.EDNS.UDPSize != 1024 {
					t.Errorf("EDNS %+v", q.EDNS)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := parseQuery(tt.pkt)
			if err != nil {
				t.Fatalf("ParseQuery: %v", err)
			}
			if !q.HasQuestion() {
				t.Fatal("no question")
			}
			tt.check(t, &q)
		})
	}
}

func TestParseQueryRejects(t *testing.T) {
	q1 := cat(wire("example", "com"), []byte{0, 1, 0, 1}) // a question
	opt := []byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0}
	long := strings.Repeat("a", 63)

	tests := []struct {
		name        string
		pkt         []byte
		want        dnswire.ParseError
		hasQuestion bool
	}{
		{"short header", []byte{1, 2, 3}, dnswire.ErrShortHeader, false},
		{"response", cat(header(1, 0x8000, 1, 0, 0, 0), q1), dnswire.ErrNotQuery, false},
		{"notify", cat(header(1, 4<<11, 1, 0, 0, 0), q1), dnswire.ErrOpcode, false},
		{"update", cat(header(1, 5<<11, 1, 0, 0, 0), q1), dnswire.ErrOpcode, false},
		{"no question", header(1, 0, 0, 0, 0, 0), dnswire.ErrQuestionCount, false},
		{"two questions", cat(header(1, 0, 2, 0, 0, 0), q1, q1), dnswire.ErrQuestionCount, false},
		{"answer record", cat(header(1, 0, 1, 1, 0, 0), q1), dnswire.ErrAnswerSections, true},
		{"authority record", cat(header(1, 0, 1, 0, 1, 0), q1), dnswire.ErrAnswerSections, true},
		{"name runs past the end", cat(header(1, 0, 1, 0, 0, 0), []byte{7, 'e', 'x'}), dnswire.ErrTruncated, false},
		{"no root label", cat(header(1, 0, 1, 0, 0, 0), []byte{3, 'c', 'o', 'm'}), dnswire.ErrTruncated, false},
		{"no qclass", cat(header(1, 0, 1, 0, 0, 0), wire("com"), []byte{0, 1}), dnswire.ErrTruncated, false},
		{"pointer in question", cat(header(1, 0, 1, 0, 0, 0), []byte{3, 'w', 'w', 'w', 0xC0, 12, 0, 1, 0, 1}), dnswire.ErrCompression, false},
		{"extended label type", cat(header(1, 0, 1, 0, 0, 0), []byte{0x41, 0, 0, 1, 0, 1}), dnswire.ErrLabelType, false},
		{"label type 0x80", cat(header(1, 0, 1, 0, 0, 0), []byte{0x81, 'a', 0, 0, 1, 0, 1}), dnswire.ErrLabelType, false},
		{"256-byte name", cat(header(1, 0, 1, 0, 0, 0), wire(long, long, long, strings.Repeat("b", 62)), []byte{0, 1, 0, 1}), dnswire.ErrNameTooLong, false},
		{"additional count without records", cat(header(1, 0, 1, 0, 0, 1), q1), dnswire.ErrTruncated, true},
		{"OPT data past the end", cat(header(1, 0, 1, 0, 0, 1), q1, []byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 9, 1}), dnswire.ErrTruncated, true},
		{"two OPT records", cat(header(1, 0, 1, 0, 0, 2), q1, opt, opt), dnswire.ErrOPTCount, true},
		{"OPT owner not root", cat(header(1, 0, 1, 0, 0, 1), q1, []byte{0xC0, 12, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0}), dnswire.ErrOPTOwner, true},
		{"option longer than the OPT", cat(header(1, 0, 1, 0, 0, 1), q1, []byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 5, 0, 10, 0, 9, 1}), dnswire.ErrOPTOptions, true},
		{"option header cut", cat(header(1, 0, 1, 0, 0, 1), q1, []byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 2, 0, 10}), dnswire.ErrOPTOptions, true},
		{"cookie of 5 bytes", cat(header(1, 0, 1, 0, 0, 1), q1, []byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 9, 0, 10, 0, 5, 1, 2, 3, 4, 5}), dnswire.ErrOPTOptions, true},
		{"forward pointer in an additional owner", cat(header(1, 0, 1, 0, 0, 1), q1, []byte{0xC0, 40, 0, 16, 0, 1, 0, 0, 0, 0, 0, 0}), dnswire.ErrBadPointer, true},
		{"pointer into the header", cat(header(1, 0, 1, 0, 0, 1), q1, []byte{0xC0, 2, 0, 16, 0, 1, 0, 0, 0, 0, 0, 0}), dnswire.ErrBadPointer, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := parseQuery(tt.pkt)
			var pe dnswire.ParseError
			if !errors.As(err, &pe) || pe != tt.want {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if q.HasQuestion() != tt.hasQuestion {
				t.Errorf("HasQuestion = %v", q.HasQuestion())
			}
			drop := tt.want == dnswire.ErrShortHeader || tt.want == dnswire.ErrNotQuery
			if pe.Drop() != drop {
				t.Errorf("Drop = %v", pe.Drop())
			}
			if !drop && q.ID != 1 {
				t.Errorf("header not kept: id %d", q.ID)
			}
			wantRcode := dnswire.RcodeFormatError
			if tt.want == dnswire.ErrOpcode {
				wantRcode = dnswire.RcodeNotImplemented
			}
			if !drop && pe.Rcode() != wantRcode {
				t.Errorf("Rcode = %d", pe.Rcode())
			}
			if pe.Error() == "" || pe.Error() == "dnswire: parse error" {
				t.Errorf("no text for %d", pe)
			}
		})
	}
}

// A Query is reused across packets by a server; nothing of the previous
// packet may survive a parse.
func TestParseQueryReuse(t *testing.T) {
	var q dnswire.Query
	if err := q.Parse(query(t, "long.example.com.", dns.TypeA, withEDNS(4096, true))); err != nil {
		t.Fatal(err)
	}
	if err := q.Parse(query(t, "a.b.", dns.TypeMX)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(q.Name(), wire("a", "b")) || q.EDNS.Present || q.QType != dns.TypeMX {
		t.Errorf("stale state: name %q EDNS %+v", q.Name(), q.EDNS)
	}
	if err := q.Parse([]byte{1}); err == nil || q.HasQuestion() || q.ID != 0 {
		t.Errorf("stale state after a short packet")
	}
}
