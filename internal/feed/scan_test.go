package feed

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// readAll reads data with read, copying each line (ScanLines' lines are
// only valid during the call), and the error.
func readAll(read func(string, bool, func(Line) error) error, data string, delta bool) ([]Line, error) {
	var out []Line
	err := read(data, delta, func(l Line) error {
		l.Name, l.Path, l.Codes = strings.Clone(l.Name), strings.Clone(l.Path), slices.Clone(l.Codes)
		out = append(out, l)
		return nil
	})
	return out, err
}

func readLinesString(data string, delta bool, fn func(Line) error) error {
	return ReadLines(strings.NewReader(data), delta, fn)
}

func scanLinesString(data string, delta bool, fn func(Line) error) error {
	return ScanLines(strings.NewReader(data), delta, fn)
}

// checkSameAsReadLines fails unless ScanLines gives the lines and the error
// ReadLines gives for data.
func checkSameAsReadLines(t *testing.T, data string, delta bool) {
	t.Helper()
	want, werr := readAll(readLinesString, data, delta)
	got, gerr := readAll(scanLinesString, data, delta)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("%q: ScanLines error %v, ReadLines error %v", data, gerr, werr)
	}
	if len(got) != len(want) {
		t.Fatalf("%q: ScanLines %d lines, ReadLines %d", data, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Path != w.Path || g.Remove != w.Remove || !slices.Equal(g.Codes, w.Codes) {
			t.Fatalf("%q: line %d: ScanLines %+v, ReadLines %+v", data, i+1, g, w)
		}
	}
}

func TestScanLinesAsReadLines(t *testing.T) {
	for _, c := range []struct {
		data  string
		delta bool
	}{
		{"a.com\t1\nb.a.com/x/y\t3,2,2\n\nc.org\t65535\n", false},
		{"a.com\t1\nb.com\t-\nc.com/p\t-\nd.com\t4,1\n", true},
		{"a.com\t1\nb.com\t-\n", false},             // a removal in a snapshot
		{"a.com\t1\nbad\nc.com\t3\n", false},        // no tab
		{"a.com\t1,x\n", false},                     // a bad code
		{"A.com\t1\n", false},                       // upper case
		{"a.com\t70000\n", false},                   // over 65535
		{"a.com\t\n", false},                        // no code
		{"a.com/a b\t1\n", false},                   // a space in the path
		{"a.com\t2,1\nb.com\t3\nc.com\t1\n", false}, // codes slice reused across lines
	} {
		checkSameAsReadLines(t, c.data, c.delta)
	}
}

// TestScanLinesReusesMemory: the point of ScanLines is to allocate nothing
// per line once its buffers exist.
func TestScanLinesReusesMemory(t *testing.T) {
	var b strings.Builder
	for i := range 2000 {
		b.WriteString("host")
		b.WriteByte(byte('a' + i%26))
		b.WriteString(".example.com\t1,2\n")
	}
	data := b.String()
	n := 0
	allocs := testing.AllocsPerRun(5, func() {
		r := strings.NewReader(data)
		if err := ScanLines(r, false, func(l Line) error { n += len(l.Codes); return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if n == 0 {
		t.Fatal("no line read")
	}
	// The scanner's buffer, the reader, the codes slice: a handful, not 2000.
	if allocs > 20 {
		t.Fatalf("ScanLines allocated %.0f times for 2000 lines", allocs)
	}
}

func TestScanLinesStops(t *testing.T) {
	stop := errors.New("stop")
	if err := ScanLines(strings.NewReader("a.com\t1\nb.com\t2\n"), false, func(Line) error { return stop }); err != stop {
		t.Fatalf("err %v, want the callback's", err)
	}
}

// FuzzScanLines: whatever the bytes, ScanLines reads what ReadLines reads.
func FuzzScanLines(f *testing.F) {
	f.Add("a.com\t1\nb.a.com/x\t3,2\n\nc.org\t-\n", true)
	f.Add("a.com\t1\nbad\n", false)
	f.Add("x.y\t1,1,0\nx.y/\t65535\n", false)
	f.Fuzz(func(t *testing.T, data string, delta bool) {
		checkSameAsReadLines(t, data, delta)
	})
}
