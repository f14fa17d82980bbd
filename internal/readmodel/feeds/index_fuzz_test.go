package feeds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// FuzzIndex: whatever the snapshot and the deltas, the index answers as
// the brute-force reference does (every key, names under them, random
// names and paths), after the build and after each delta, and every
// earlier Index still answers as it did. The input is a program: each
// three bytes are a line (a name of one to four labels from a small set,
// so that names are parents of one another and keys repeat; a path; codes
// or a removal); a line whose first byte is 0xff ends the snapshot or the
// current delta.
//
//	go test -run '^$' -fuzz FuzzIndex -fuzztime 20s ./internal/readmodel/feeds/
func FuzzIndex(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 0xff, 0, 0, 1, 1, 2, 0x80})
	f.Add([]byte{0x21, 0x10, 0x01, 0x21, 0x10, 0x81, 0xff, 0, 0, 0, 0x21, 0x11, 0x02, 0xff, 0, 0, 0, 0x21, 0x10, 0x83})
	f.Add([]byte(strings.Repeat("\x13\x27\x05\x44\x31\x86", 30) + "\xff\x00\x00" + strings.Repeat("\x13\x27\x85\x52\x03\x07", 10)))
	f.Fuzz(func(t *testing.T, prog []byte) {
		// Checks cost a few milliseconds each: a bound on the program keeps
		// the fuzzer exploring rather than checking.
		if len(prog) > 1500 {
			prog = prog[:1500]
		}
		var (
			ix   *Index
			b    = NewBuilder(len(prog) / 3)
			ref  = indexRef{}
			gens []struct {
				ix  *Index
				ref indexRef
			}
			delta []feed.Line
			rnd   = rand.New(rand.NewPCG(uint64(len(prog)), 7))
		)
		step := func() {
			if ix == nil {
				ix = b.Index()
			} else {
				gens = append(gens, struct {
					ix  *Index
					ref indexRef
				}{ix, maps.Clone(ref)})
				for _, l := range delta {
					ref.set(l)
				}
				ix = ix.Apply(delta)
				delta = nil
			}
			checkIndexEqual(t, ix, ref, rnd, fmt.Sprintf("after %d deltas", len(gens)))
		}
		for i := 0; i+3 <= len(prog); i += 3 {
			if prog[i] == 0xff {
				if len(gens) < 12 {
					step()
				}
				continue
			}
			l := fuzzLine(prog[i : i+3])
			if ix == nil {
				b.Set(l)
				ref.set(l)
			} else {
				delta = append(delta, l)
			}
		}
		step()
		for i, g := range gens {
			checkIndexEqual(t, g.ix, g.ref, rnd, fmt.Sprintf("generation %d after later deltas", i))
		}
	})
}

// fuzzLabels: names up to 24 bytes, names of 25 to 32 (packed in their
// entries), longer ones (records).
var fuzzLabels = []string{"a", "b", "com", "net", "www", "example-cdn_tracker", strings.Repeat("long", 9), "x-y"}

// fuzzLine decodes one line of FuzzIndex's program.
func fuzzLine(p []byte) feed.Line {
	labels := make([]string, 1+int(p[0]>>6))
	for i := range labels {
		labels[i] = fuzzLabels[int(p[0]>>(i%2*3))&7]
		if i == 0 && p[1]&0x80 != 0 {
			labels[i] = fmt.Sprintf("n%d", p[1]&0x3f) // many distinct names
		}
	}
	l := feed.Line{Name: strings.Join(labels, ".")}
	if p[1]&0x40 != 0 {
		l.Path = indexPropPaths[1+int(p[1]&0x0f)%(len(indexPropPaths)-1)]
	}
	if p[2]&0x80 != 0 {
		l.Remove = true
		return l
	}
	l.Codes = []uint16{uint16(p[2] & 0x0f)}
	if p[2]&0x40 != 0 {
		l.Codes = append(l.Codes, uint16(16+p[2]&0x3f))
	}
	return l
}
