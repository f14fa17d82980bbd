package feeds

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// The good delta every fault test tries to apply: version 2.
var goodDelta = []feed.Line{putLine("ads.example.com", 3), putLine("new.example.com", 4)}

func goodDeltaFile() []byte { return gzLines(goodDelta...) }

// bigDelta is a delta whose gzip file is tens of kilobytes: names that do
// not repeat compress poorly.
func bigDelta() []byte {
	var lines []feed.Line
	for i := range 3000 {
		lines = append(lines, putLine(fmt.Sprintf("h%x.example", uint32(i)*2654435761), uint16(i)))
	}
	return gzLines(lines...)
}

// feedFault breaks the publish of version 2 in one way; repair undoes it.
type feedFault struct {
	name     string
	reason   reason
	httpOnly bool
	tweak    func(*Config)
	inject   func(e *clientEnv)
	repair   func(e *clientEnv)
}

func feedFaults() []feedFault {
	rewrite := func(e *clientEnv) { e.d.replaceLast(goodDelta...) }
	noFault := func(e *clientEnv) { e.srv.setFault(nil) }
	return []feedFault{
		{
			name: "corrupt gzip", reason: reasonDecode,
			// The manifest lists the corrupt bytes' checksum: the build
			// itself wrote them, and only decoding can tell.
			inject: func(e *clientEnv) {
				data := goodDeltaFile()
				for i := 12; i < len(data)-8; i += 3 {
					data[i] ^= 0x5a
				}
				e.d.addRaw(feed.TypeDelta, data, 2)
			},
			repair: rewrite,
		},
		{
			name: "checksum mismatch", reason: reasonChecksum,
			inject: func(e *clientEnv) {
				v := e.d.delta(goodDelta...)
				e.d.write(v.File, gzLines(putLine("ads.example.com", 9)))
			},
			repair: func(e *clientEnv) { e.d.write("delta_2.gz", goodDeltaFile()) },
		},
		{
			name: "truncated gzip", reason: reasonDecode,
			inject: func(e *clientEnv) {
				data := goodDeltaFile()
				e.d.addRaw(feed.TypeDelta, data[:len(data)-6], 2)
			},
			repair: rewrite,
		},
		{
			name: "truncated in transit", reason: reasonChecksum,
			inject: func(e *clientEnv) {
				v := e.d.delta(goodDelta...)
				data := goodDeltaFile()
				e.d.write(v.File, data[:len(data)/2])
			},
			repair: func(e *clientEnv) { e.d.write("delta_2.gz", goodDeltaFile()) },
		},
		{
			name: "manifest names a missing file", reason: reasonFetch,
			inject: func(e *clientEnv) { e.d.remove(e.d.delta(goodDelta...).File) },
			repair: func(e *clientEnv) { e.d.write("delta_2.gz", goodDeltaFile()) },
		},
		{
			name: "invalid manifest JSON", reason: reasonManifest,
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				e.d.write(feed.ManifestFile, []byte(`{"v":1,"name":"ads","versions":[{"version":`))
			},
			repair: func(e *clientEnv) { e.d.publish() },
		},
		{
			name: "invalid manifest", reason: reasonManifest,
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				m := e.d.manifest()
				m.Versions[1].File = "../../etc/passwd"
				e.d.writeManifest(m)
			},
			repair: func(e *clientEnv) { e.d.publish() },
		},
		{
			name: "invalid codes", reason: reasonManifest,
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				e.d.write(feed.CodesFile, []byte(`{"v":2,"codes":[]}`))
			},
			repair: func(e *clientEnv) { e.d.publish() },
		},
		{
			name: "server returns 500", reason: reasonFetch, httpOnly: true,
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				e.srv.setFault(func(w http.ResponseWriter, r *http.Request) bool {
					http.Error(w, "boom", http.StatusInternalServerError)
					return true
				})
			},
			repair: noFault,
		},
		{
			name: "server returns 500 for a delta", reason: reasonFetch, httpOnly: true,
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				e.srv.setFault(func(w http.ResponseWriter, r *http.Request) bool {
					if path.Base(r.URL.Path) == "delta_2.gz" {
						http.Error(w, "boom", http.StatusBadGateway)
						return true
					}
					return false
				})
			},
			repair: noFault,
		},
		{
			name: "server down", reason: reasonFetch, httpOnly: true,
			inject: func(e *clientEnv) { e.d.delta(goodDelta...); e.srv.stop() },
			repair: func(e *clientEnv) { e.srv.restart() },
		},
		{
			name: "slow server", reason: reasonFetch, httpOnly: true,
			tweak: func(c *Config) { c.FetchTimeout = 300 * time.Millisecond },
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				e.srv.setFault(func(w http.ResponseWriter, r *http.Request) bool {
					select {
					case <-r.Context().Done():
					case <-time.After(10 * time.Second):
					}
					return true
				})
			},
			repair: noFault,
		},
		{
			name: "slow body", reason: reasonFetch, httpOnly: true,
			tweak: func(c *Config) { c.FetchTimeout = 300 * time.Millisecond },
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				e.srv.setFault(func(w http.ResponseWriter, r *http.Request) bool {
					if path.Base(r.URL.Path) != "delta_2.gz" {
						return false
					}
					data := goodDeltaFile()
					w.Header().Set("Content-Length", fmt.Sprint(len(data)))
					_, _ = w.Write(data[:10])
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
					case <-time.After(10 * time.Second):
					}
					return true
				})
			},
			repair: noFault,
		},
		{
			name: "oversize file", reason: reasonSize,
			tweak: func(c *Config) { c.Limits.FileBytes = 4 << 10 },
			inject: func(e *clientEnv) {
				e.d.addRaw(feed.TypeDelta, bigDelta(), 3000)
			},
			repair: rewrite,
		},
		{
			name: "oversize file, no Content-Length", reason: reasonSize, httpOnly: true,
			tweak: func(c *Config) { c.Limits.FileBytes = 4 << 10 },
			inject: func(e *clientEnv) {
				e.d.addRaw(feed.TypeDelta, bigDelta(), 3000)
				e.srv.setFault(func(w http.ResponseWriter, r *http.Request) bool {
					if path.Base(r.URL.Path) != "delta_2.gz" {
						return false
					}
					_, _ = w.Write(bigDelta()) // chunked: the size shows only while reading
					return true
				})
			},
			repair: func(e *clientEnv) { e.srv.setFault(nil); e.d.replaceLast(goodDelta...) },
		},
		{
			name: "decompression bomb", reason: reasonSize,
			tweak: func(c *Config) { c.Limits.DecompressedBytes = 64 << 10 },
			inject: func(e *clientEnv) {
				raw := strings.Repeat("ads.example.com\t1\n", 10000)
				e.d.addRaw(feed.TypeDelta, gzBytes([]byte(raw)), 10000)
			},
			repair: rewrite,
		},
		{
			name: "oversize manifest", reason: reasonSize,
			tweak: func(c *Config) { c.Limits.ManifestBytes = 2 << 10 },
			inject: func(e *clientEnv) {
				e.d.delta(goodDelta...)
				m := e.d.manifest()
				m.Name = strings.Repeat("x", 4<<10)
				e.d.writeManifest(m)
			},
			repair: func(e *clientEnv) { e.d.publish() },
		},
		{
			name: "too many entries", reason: reasonSize,
			tweak: func(c *Config) { c.Limits.Entries = 3 },
			inject: func(e *clientEnv) {
				e.d.delta(putLine("a.example", 1), putLine("b.example", 1))
			},
			repair: func(e *clientEnv) { e.d.replaceLast(goodDelta...) },
		},
		{
			name: "overlong line", reason: reasonDecode,
			inject: func(e *clientEnv) {
				raw := "ads.example.com/" + strings.Repeat("p", 2<<20) + "\t1\n"
				e.d.addRaw(feed.TypeDelta, gzBytes([]byte(raw)), 1)
			},
			repair: rewrite,
		},
		{
			name: "entries disagree with the manifest", reason: reasonDecode,
			inject: func(e *clientEnv) { e.d.addRaw(feed.TypeDelta, goodDeltaFile(), 5) },
			repair: rewrite,
		},
		{
			name: "empty snapshot said to have entries", reason: reasonDecode,
			inject: func(e *clientEnv) {
				e.d.versions = nil
				e.d.addRaw(feed.TypeSnapshot, gzLines(), 3)
			},
			repair: func(e *clientEnv) {
				e.d.replaceLast(putLine("ads.example.com", 3), putLine("new.example.com", 4), putLine("keep.example.com", 2))
			},
		},
		{
			name: "removal in a snapshot", reason: reasonDecode,
			inject: func(e *clientEnv) {
				e.d.versions = nil
				e.d.addRaw(feed.TypeSnapshot, gzLines(putLine("ads.example.com", 3), delLine("keep.example.com")), 2)
			},
			repair: func(e *clientEnv) {
				e.d.replaceLast(putLine("ads.example.com", 3), putLine("new.example.com", 4), putLine("keep.example.com", 2))
			},
		},
	}
}

// TestFaults publishes version 2 broken in each way: the node keeps
// answering from version 1, counts and logs the failure once, and applies
// version 2 once the fault is repaired.
func TestFaults(t *testing.T) {
	for _, f := range feedFaults() {
		for _, mode := range sourceModes {
			if f.httpOnly && mode != "http" {
				continue
			}
			t.Run(f.name+"/"+mode, func(t *testing.T) {
				e := newClientEnv(t, mode, f.tweak)
				e.d.snapshot(putLine("ads.example.com", 1), putLine("keep.example.com", 2))
				e.c.mustPoll()
				good := e.c.Set()

				f.inject(e)
				for i := range 2 {
					err := e.c.pollAll()
					if err == nil {
						t.Fatalf("poll %d with the fault succeeded", i)
					}
					if r := reasonOf(err); r != f.reason {
						t.Fatalf("poll %d: reason %s, want %s: %v", i, r, f.reason, err)
					}
				}
				if e.c.Set() != good {
					t.Fatal("a failed update published a Set")
				}
				expectCodes(t, e.c, "ads.example.com", "ads:1")
				expectCodes(t, e.c, "keep.example.com", "ads:2")
				expectCodes(t, e.c, "new.example.com")
				if n := e.c.failures("ads", f.reason); n != 2 {
					t.Fatalf("svcpf_feed_update_failures_total{reason=%q} = %v, want 2", f.reason, n)
				}
				if n := e.c.logs.count("feed update failed"); n != 1 {
					t.Fatalf("logged the failure %d times, want once:\n%s", n, e.c.logs.buf.String())
				}
				st := e.c.Status()[0]
				if st.Version != 1 || st.Failures != 2 || st.LastError == "" {
					t.Fatalf("status during the fault %+v", st)
				}
				if v := e.c.gauge(e.c.m.version, "ads"); v != 1 {
					t.Fatalf("svcpf_feed_version = %v during the fault", v)
				}

				f.repair(e)
				e.c.mustPoll()
				if v := e.c.version("ads"); v != 2 {
					t.Fatalf("version %d after the repair, want 2", v)
				}
				expectCodes(t, e.c, "ads.example.com", "ads:3")
				expectCodes(t, e.c, "new.example.com", "ads:4")
				st = e.c.Status()[0]
				if st.Failures != 0 || st.LastError != "" {
					t.Fatalf("status after the repair %+v", st)
				}
				if n := e.c.logs.count("feed update recovered"); n != 1 {
					t.Fatalf("logged the recovery %d times", n)
				}
			})
		}
	}
}

// TestFaultBeforeFirstLoad: a feed that fails from the start serves
// nothing, is not ready, and loads once repaired.
func TestFaultBeforeFirstLoad(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.d.snapshot(putLine("a.example", 1))
	e.d.write("snapshot_1.gz", []byte("not gzip at all"))
	if err := e.c.pollAll(); reasonOf(err) != reasonChecksum {
		t.Fatalf("poll: %v", err)
	}
	if e.c.Ready() || len(e.c.Set().Feeds()) != 0 {
		t.Fatal("a feed that failed its first load is served")
	}
	e.d.write("snapshot_1.gz", gzLines(putLine("a.example", 1)))
	e.c.mustPoll()
	if !e.c.Ready() {
		t.Fatal("not ready after the repair")
	}
}

// TestStaleMirror: one poll meets an older manifest (a mirror behind the
// others); the node keeps its version and goes on when the manifest is
// current again.
func TestStaleMirror(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("ads.example.com", 1))
		stale := e.d.manifest()
		e.d.delta(putLine("ads.example.com", 2))
		e.c.mustPoll()

		e.d.writeManifest(stale)
		for range 2 {
			if err := e.c.pollAll(); reasonOf(err) != reasonBackwards {
				t.Fatalf("poll: %v, want a backwards failure", err)
			}
		}
		expectCodes(t, e.c, "ads.example.com", "ads:2")
		if n := e.c.failures("ads", reasonBackwards); n != 2 {
			t.Fatalf("failures %v", n)
		}
		if n := e.c.logs.count("feed update failed"); n != 1 {
			t.Fatalf("logged %d times", n)
		}

		e.d.delta(putLine("ads.example.com", 3))
		e.c.mustPoll()
		if v := e.c.version("ads"); v != 3 {
			t.Fatalf("version %d, want 3", v)
		}
		expectCodes(t, e.c, "ads.example.com", "ads:3")
	})
}
