package cache

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// storedOffs lays offs out as Put stores them in an entry.
func storedOffs(offs []uint16) []byte {
	b := make([]byte, 2*len(offs))
	for i, o := range offs {
		binary.BigEndian.PutUint16(b[2*i:], o)
	}
	return b
}

func packAnswer(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func answerMsg(t testing.TB, name string, rcode int, answer []string, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response, m.Rcode = true, rcode
	for _, s := range answer {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = append(m.Answer, r)
	}
	if edns {
		m.SetEdns0(1232, true)
	}
	return m
}

// TestAgeTTLs: each TTL loses the elapsed seconds and stops at 0; the
// OPT record (whose TTL field holds the extended rcode and flags) is not
// touched.
func TestAgeTTLs(t *testing.T) {
	msg := packAnswer(t, answerMsg(t, "example.com.", 0, []string{
		"example.com. 100 IN A 192.0.2.1",
		"example.com. 5 IN A 192.0.2.2",
		"example.com. 90000 IN A 192.0.2.3",
	}, true))
	_, offs, err := dnswire.ScanAnswer(msg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dnswire.ClampTTLs(msg, offs, 86400)
	ageTTLs(msg, storedOffs(offs), 10)
	var m dns.Msg
	if err := m.Unpack(msg); err != nil {
		t.Fatal(err)
	}
	want := []uint32{90, 0, 86390}
	for i, rr := range m.Answer {
		if rr.Header().Ttl != want[i] {
			t.Errorf("record %d TTL %d, want %d", i, rr.Header().Ttl, want[i])
		}
	}
	if opt := m.IsEdns0(); opt == nil || !opt.Do() || opt.UDPSize() != 1232 || opt.ExtendedRcode() != 0 {
		t.Errorf("OPT was touched: %v", opt)
	}
}

// FuzzAgeTTLs: for any answer ScanAnswer accepts, aging over the offsets
// as an entry stores them never writes outside the message, changes no
// byte but the TTLs at those offsets, and leaves each TTL at its value
// less the elapsed seconds, or 0.
func FuzzAgeTTLs(f *testing.F) {
	for _, s := range []struct {
		m       *dns.Msg
		elapsed uint32
	}{
		{answerMsg(f, "www.example.com.", 0, []string{"www.example.com. 3600 IN CNAME web.example.com.", "web.example.com. 120 IN A 192.0.2.1"}, true), 7},
		{answerMsg(f, "example.com.", 0, []string{"example.com. 5 IN A 192.0.2.2", "example.com. 2147483648 IN A 192.0.2.3"}, false), 10},
		{answerMsg(f, "nope.example.com.", dns.RcodeNameError, nil, true), 1 << 31},
	} {
		f.Add(packAnswer(f, s.m), s.elapsed)
	}
	f.Fuzz(func(t *testing.T, b []byte, elapsed uint32) {
		_, offs, err := dnswire.ScanAnswer(b, nil)
		if err != nil {
			return
		}
		before := bytes.Clone(b)
		ageTTLs(b, storedOffs(offs), elapsed)
		if len(b) != len(before) {
			t.Fatal("length changed")
		}
		at := make(map[int]bool, len(offs))
		for _, o := range offs {
			old, got := binary.BigEndian.Uint32(before[o:]), binary.BigEndian.Uint32(b[o:])
			if got != old-min(old, elapsed) {
				t.Fatalf("TTL at %d: %d aged by %d is %d", o, old, elapsed, got)
			}
			for i := range 4 {
				at[int(o)+i] = true
			}
		}
		for i := range b {
			if !at[i] && b[i] != before[i] {
				t.Fatalf("byte %d changed outside the TTLs", i)
			}
		}
	})
}
