package orgstore

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
)

func TestPlanBatch(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	up := func(c, u string) BatchOp {
		return BatchOp{Override: Override{CIDR: p(c), Attributes: identity.Attributes{Username: u}}}
	}
	del := func(c string) BatchOp { return BatchOp{Delete: true, Override: Override{CIDR: p(c)}} }
	deletes, upserts, err := planBatch([]BatchOp{
		up("10.0.0.0/24", "a"), del("10.0.0.0/24"),
		del("10.0.1.0/24"), up("10.0.1.0/24", "b"),
		up("10.0.2.0/24", "c1"), up("10.0.2.0/24", "c2"),
		up("10.0.3.0/24", "d1"), del("10.0.3.0/24"), up("10.0.3.0/24", "d2"), up("10.0.3.0/24", "d3"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var dels []string
	for _, k := range deletes {
		q, _ := decodeKey(k)
		dels = append(dels, q.String())
	}
	slices.Sort(dels)
	if want := []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.3.0/24"}; !slices.Equal(dels, want) {
		t.Fatalf("deletes = %v, want %v", dels, want)
	}
	var ups []string
	for _, r := range upserts {
		q, _ := decodeKey(r.key)
		ups = append(ups, q.String()+"="+r.username)
	}
	if want := []string{"10.0.1.0/24=b", "10.0.2.0/24=c2", "10.0.3.0/24=d3"}; !slices.Equal(ups, want) {
		t.Fatalf("upserts = %v, want %v", ups, want)
	}
}

// TestPreparedOverrideIsCheckedOnce: the write takes what PrepareOverride
// derived as long as the override still holds what it checked, and checks
// again in full once anything it checked has changed.
func TestPreparedOverrideIsCheckedOnce(t *testing.T) {
	o, err := PrepareOverride(Override{
		CIDR:       netip.MustParsePrefix("10.0.0.0/24"),
		Attributes: identity.Attributes{Username: "alice"},
		Meta:       json.RawMessage(`{ "trace_id": "t" }`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Meta) != `{"trace_id":"t"}` || o.TraceID != "t" || o.checked == nil {
		t.Fatalf("prepared %+v", o)
	}
	// A mark the write would only see if it used the prepared result.
	o.checked.traceID = "from PrepareOverride"
	if r, err := newUpsertRow(&o); err != nil || r.traceID != "from PrepareOverride" || r.meta != `{"trace_id":"t"}` {
		t.Fatalf("prepared row = %+v, %v; want PrepareOverride's", r, err)
	}

	changed := func(name string, change func(o *Override), wantTrace string, wantErr bool) {
		t.Helper()
		c := o
		c.Meta = slices.Clone(o.Meta)
		change(&c)
		r, err := newUpsertRow(&c)
		if wantErr {
			if !errors.Is(err, ErrInvalidInput) {
				t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
			}
			return
		}
		if err != nil || r.traceID != wantTrace {
			t.Errorf("%s: row %+v, %v; want trace id %q", name, r, err, wantTrace)
		}
	}
	changed("username", func(o *Override) { o.Username = "bob" }, "t", false)
	changed("username with NUL", func(o *Override) { o.Username = "a\x00" }, "", true)
	changed("location too long", func(o *Override) { o.Location = strings.Repeat("l", identity.MaxAttributeLen+1) }, "", true)
	changed("meta bytes in place", func(o *Override) { o.Meta[len(o.Meta)-3] = 'u' }, "u", false)
	changed("meta no object", func(o *Override) { o.Meta[0] = '[' }, "", true)
	changed("meta removed", func(o *Override) { o.Meta = nil }, "", false)
	changed("meta emptied", func(o *Override) { o.Meta = o.Meta[:0] }, "", true)
	changed("meta replaced", func(o *Override) { o.Meta = json.RawMessage(`{"trace_id":"a\u0000"}`) }, "", true)

	// An override built without PrepareOverride is checked in full.
	for _, bad := range []Override{
		{CIDR: o.CIDR, Attributes: identity.Attributes{DeviceID: strings.Repeat("d", identity.MaxAttributeLen+1)}},
		{CIDR: o.CIDR, Meta: json.RawMessage(`{"k":"` + strings.Repeat("m", MaxMetaLen) + `"}`)},
	} {
		if _, err := newUpsertRow(&bad); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("unprepared %.60q…: err = %v, want ErrInvalidInput", bad.DeviceID+string(bad.Meta), err)
		}
	}
}

// TestPrepareOverrideRefusals: the refusals wrap ErrInvalidInput (and so
// identity.ErrInvalid) with the texts the API shows.
func TestPrepareOverrideRefusals(t *testing.T) {
	c := netip.MustParsePrefix("10.0.0.0/24")
	for _, tc := range []struct {
		o    Override
		want string
	}{
		{Override{CIDR: netip.MustParsePrefix("10.0.0.1/24")}, "invalid input: CIDR 10.0.0.1/24 has host bits set"},
		{Override{CIDR: c, Attributes: identity.Attributes{Username: strings.Repeat("u", 1025)}}, "username longer than 1024 bytes"},
		{Override{CIDR: c, Meta: json.RawMessage(` [1]`)}, "meta must be a JSON object"},
		{Override{CIDR: c, Meta: json.RawMessage(`null`)}, "meta must be a JSON object"},
		{Override{CIDR: c, Meta: json.RawMessage("{\"\xff\":1}")}, "meta is not valid UTF-8"},
		{Override{CIDR: c, Meta: json.RawMessage(`{"a":}`)}, "meta: invalid character '}' looking for beginning of value"},
		{Override{CIDR: c, Meta: json.RawMessage(`{"k":"` + strings.Repeat("m", MaxMetaLen-7) + `"}`)}, "meta larger than 16384 bytes"},
		{Override{CIDR: c, Meta: json.RawMessage(`{"trace_id":"\u0000"}`)}, "invalid input: meta.trace_id contains a NUL character"},
	} {
		_, err := PrepareOverride(tc.o)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrInvalidInput) || !errors.Is(err, identity.ErrInvalid) {
			t.Errorf("PrepareOverride(%.60q) err = %v, want %q wrapping ErrInvalidInput", tc.o.Username+string(tc.o.Meta), err, tc.want)
		}
	}
	var syntax *json.SyntaxError
	if _, err := PrepareOverride(Override{CIDR: c, Meta: json.RawMessage(`{"a":}`)}); !errors.As(err, &syntax) {
		t.Errorf("a meta syntax error does not wrap *json.SyntaxError: %v", err)
	}
	// Exactly at the limit is fine.
	if _, err := PrepareOverride(Override{CIDR: c, Meta: json.RawMessage(`{"k":"` + strings.Repeat("m", MaxMetaLen-8) + `"}`)}); err != nil {
		t.Errorf("meta of MaxMetaLen bytes: %v", err)
	}
}
