package feeds

import (
	"bytes"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// FuzzDecodeFile: decodeFile accepts a complete gzip file of valid lines
// exactly as feed.ReadLines reads the content, refuses every strict prefix
// of it (a truncated download or build must never apply part of a file),
// and refuses content over the cap with errTooLarge.
func FuzzDecodeFile(f *testing.F) {
	f.Add([]byte("a.com\t1\nb.com/x\t2,3\n"), false, uint16(0))
	f.Add([]byte("a.com\t-\n"), true, uint16(5))
	f.Add([]byte(""), false, uint16(0))
	f.Add([]byte("bad line\n"), false, uint16(3))
	f.Add(bytes.Repeat([]byte("ads.example.com\t1\n"), 100), true, uint16(40))
	const maxBytes = 1 << 10
	f.Fuzz(func(t *testing.T, content []byte, delta bool, cut uint16) {
		var want []feed.Line
		wantErr := feed.ReadLines(bytes.NewReader(content), delta, func(l feed.Line) error {
			want = append(want, l)
			return nil
		})
		data := gzBytes(content)
		var got []feed.Line
		err := decodeFile(data, delta, maxBytes, false, func(l feed.Line) error {
			got = append(got, l)
			return nil
		})
		switch {
		case len(content) > maxBytes:
			if err == nil || wantErr == nil && !errors.Is(err, errTooLarge) {
				t.Fatalf("%d bytes decompressed under a cap of %d: %v", len(content), maxBytes, err)
			}
		case (err == nil) != (wantErr == nil):
			t.Fatalf("decodeFile: %v, ReadLines: %v", err, wantErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("decodeFile read %v, ReadLines %v", got, want)
		}
		if n := int(cut) % (len(data) + 1); n < len(data) {
			if err := decodeFile(data[:n], delta, maxBytes, false, func(feed.Line) error { return nil }); err == nil {
				t.Fatalf("a prefix of %d of %d bytes decoded", n, len(data))
			}
		}
	})
}

// FuzzPlanUpdate: whatever the manifest, the held version and the delay,
// a plan fetches a contiguous run of versions that ends at its target and
// starts either right after the held version (deltas, only when the
// manifest proves the first builds on the content held) or at the
// snapshot. heldContent picks the held content checksum: 0 none (loaded
// from an older manifest), 1 the manifest's for that version, else
// another history's.
func FuzzPlanUpdate(f *testing.F) {
	s := strings.Repeat("a", 64)
	b, c := strings.Repeat("b", 64), strings.Repeat("c", 64)
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":3,"type":"snapshot","file":"s","sha256":"`+s+`","created_at":"2026-03-01T11:00:00Z"},{"version":4,"type":"delta","file":"d","sha256":"`+s+`","created_at":"2026-03-01T11:59:00Z"}]}`),
		int64(3), true, uint8(0), uint16(30))
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":1,"type":"snapshot","file":"s","sha256":"`+s+`"}]}`),
		int64(7), false, uint8(0), uint16(0))
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":3,"type":"snapshot","file":"s","sha256":"`+s+`","content_sha256":"`+b+`"},`+
		`{"version":4,"type":"delta","file":"d","sha256":"`+s+`","content_sha256":"`+c+`","base_sha256":"`+b+`"}],`+
		`"catch_up":[{"version":3,"type":"delta","file":"d3","sha256":"`+s+`","content_sha256":"`+b+`","base_sha256":"`+s+`"}]}`),
		int64(2), true, uint8(1), uint16(0))
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":3,"type":"snapshot","file":"s","sha256":"`+s+`","content_sha256":"`+b+`"},`+
		`{"version":4,"type":"delta","file":"d","sha256":"`+s+`","content_sha256":"`+c+`","base_sha256":"`+b+`"}]}`),
		int64(3), true, uint8(2), uint16(0))
	f.Fuzz(func(t *testing.T, manifest []byte, heldVersion int64, sameSum bool, heldContent uint8, delayMinutes uint16) {
		m, err := feed.DecodeManifest(manifest)
		if err != nil {
			return
		}
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		delay := time.Duration(delayMinutes) * time.Minute
		var held *feed.Version
		if heldVersion > 0 {
			held = &feed.Version{Version: heldVersion, SHA256: strings.Repeat("f", 64)}
			if heldContent > 1 {
				held.ContentSHA256 = strings.Repeat("e", 64)
			}
			for _, v := range slices.Concat(m.CatchUp, m.Versions) {
				if v.Version == heldVersion && sameSum {
					held.SHA256 = v.SHA256
				}
				switch {
				case heldContent == 1 && v.Version == heldVersion && v.ContentSHA256 != "":
					held.ContentSHA256 = v.ContentSHA256
				case heldContent == 1 && v.Version == heldVersion+1 && v.BaseSHA256 != "" && held.ContentSHA256 == "":
					held.ContentSHA256 = v.BaseSHA256
				}
			}
		}
		p := planUpdate(m, held, now, delay)
		if p.eligible < 0 || p.eligible > len(m.Versions) {
			t.Fatalf("eligible %d of %d", p.eligible, len(m.Versions))
		}
		if p.eligible == 0 {
			if p.kind != planNone {
				t.Fatalf("plan %v with nothing old enough", p.kind)
			}
			return
		}
		if p.target != m.Versions[p.eligible-1] {
			t.Fatalf("target %d, newest eligible %d", p.target.Version, m.Versions[p.eligible-1].Version)
		}
		contiguous := func(first int64) {
			if len(p.files) == 0 || p.files[0].Version != first || p.files[len(p.files)-1].Version != p.target.Version {
				t.Fatalf("plan %v fetches %v, want %d to %d", p.kind, p.files, first, p.target.Version)
			}
			for i := 1; i < len(p.files); i++ {
				if p.files[i].Version != p.files[i-1].Version+1 || p.files[i].Type != feed.TypeDelta {
					t.Fatalf("files %v", p.files)
				}
			}
		}
		switch p.kind {
		case planNone:
			if held == nil || held.Version != p.target.Version || p.continuity != feed.Continues {
				t.Fatalf("nothing to do while holding %v with target %d", held, p.target.Version)
			}
			if held.ContentSHA256 != "" && p.target.ContentSHA256 != "" && held.ContentSHA256 != p.target.ContentSHA256 {
				t.Fatalf("kept %v as target %v", held, p.target)
			}
		case planDeltas:
			if held == nil || held.ContentSHA256 == "" || p.files[0].BaseSHA256 != held.ContentSHA256 {
				t.Fatalf("deltas %v onto %v", p.files, held)
			}
			contiguous(held.Version + 1)
		case planSnapshot:
			contiguous(m.Versions[0].Version)
			if p.files[0] != m.Versions[0] {
				t.Fatalf("snapshot plan starts with %v", p.files[0])
			}
			if held != nil && heldContent == 1 && held.ContentSHA256 != "" && held.Version >= m.Versions[0].Version &&
				held.Version < p.target.Version && m.Versions[held.Version-m.Versions[0].Version+1].BaseSHA256 == held.ContentSHA256 {
				t.Fatalf("a snapshot reload though the manifest's deltas build on the held version %d", held.Version)
			}
		case planBackwards:
			if held == nil || p.target.Version >= held.Version {
				t.Fatalf("backwards from %v to %d", held, p.target.Version)
			}
			contiguous(m.Versions[0].Version)
		}
	})
}

// FuzzNewSource: any url either is refused or names a directory that the
// manifest's plain file names resolve inside of.
func FuzzNewSource(f *testing.F) {
	for _, s := range []string{"https://h/feeds/ads", "http://h:8080/a%2Fb/", "file:///srv/x", "rel/dir", "http://u:p@h/x", "http://[::1]/", "://x", "http://0/./0", "http://h/a/../../b", "http://0/%2F"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		src, err := newSource(raw, nil)
		if err != nil {
			return
		}
		hs, ok := src.(*httpSource)
		if !ok {
			return
		}
		if hs.base.Host == "" || !strings.HasSuffix(hs.base.EscapedPath(), "/") {
			t.Fatalf("%q → base %q", raw, hs.base)
		}
		u := hs.base.ResolveReference(&url.URL{Path: feed.ManifestFile})
		if u.Host != hs.base.Host || u.EscapedPath() != hs.base.EscapedPath()+feed.ManifestFile {
			t.Fatalf("%q: feed.json resolves to %q", raw, u)
		}
	})
}
