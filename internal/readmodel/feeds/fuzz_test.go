package feeds

import (
	"bytes"
	"errors"
	"net/url"
	"reflect"
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
		err := decodeFile(data, delta, maxBytes, func(l feed.Line) error {
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
			if err := decodeFile(data[:n], delta, maxBytes, func(feed.Line) error { return nil }); err == nil {
				t.Fatalf("a prefix of %d of %d bytes decoded", n, len(data))
			}
		}
	})
}

// FuzzPlanUpdate: whatever the manifest, the held version and the delay,
// a plan fetches a contiguous run of versions that ends at its target and
// starts either right after the held version (deltas, only when the
// manifest lists the held version with its checksum) or at the snapshot.
func FuzzPlanUpdate(f *testing.F) {
	s := strings.Repeat("a", 64)
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":3,"type":"snapshot","file":"s","sha256":"`+s+`","created_at":"2026-03-01T11:00:00Z"},{"version":4,"type":"delta","file":"d","sha256":"`+s+`","created_at":"2026-03-01T11:59:00Z"}]}`),
		int64(3), true, uint16(30))
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":1,"type":"snapshot","file":"s","sha256":"`+s+`"}]}`),
		int64(7), false, uint16(0))
	f.Fuzz(func(t *testing.T, manifest []byte, heldVersion int64, sameSum bool, delayMinutes uint16) {
		m, err := feed.DecodeManifest(manifest)
		if err != nil {
			return
		}
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		delay := time.Duration(delayMinutes) * time.Minute
		var held *feed.Version
		if heldVersion > 0 {
			held = &feed.Version{Version: heldVersion, SHA256: strings.Repeat("f", 64)}
			for _, v := range m.Versions {
				if v.Version == heldVersion && sameSum {
					held.SHA256 = v.SHA256
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
			if len(p.files) == 0 || p.files[0].Version != first || p.files[len(p.files)-1] != p.target {
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
			if held == nil || held.Version != p.target.Version || p.diverged {
				t.Fatalf("nothing to do while holding %v with target %d", held, p.target.Version)
			}
		case planDeltas:
			if held == nil || !sameSum {
				t.Fatalf("deltas onto %v (same checksum %v)", held, sameSum)
			}
			contiguous(held.Version + 1)
		case planSnapshot:
			contiguous(m.Versions[0].Version)
			if held != nil && held.Version >= m.Versions[0].Version && held.Version <= p.target.Version && sameSum {
				t.Fatalf("a snapshot reload though the held version %d is listed", held.Version)
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
