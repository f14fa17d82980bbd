package sessionsnap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

func write(t testing.TB, recs [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, r := range recs {
		if err := w.Add(r[0], []byte(r[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(b []byte) ([][2]string, error) {
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for {
		k, v, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, [2]string{k, string(v)})
	}
}

func TestRoundTrip(t *testing.T) {
	var recs [][2]string
	for i := range 5000 {
		recs = append(recs, [2]string{fmt.Sprintf("id-%d", i), fmt.Sprintf(`{"id":"id-%d","n":%d}`, i, i)})
	}
	recs = append(recs, [2]string{"empty-value", ""}, [2]string{"big", string(bytes.Repeat([]byte("x"), slabSize))})
	got, err := readAll(write(t, recs))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d records, want %d", len(got), len(recs))
	}
	for i := range recs {
		if got[i] != recs[i] {
			t.Fatalf("record %d: %q, want %q", i, got[i][0], recs[i][0])
		}
	}
	if got, err := readAll(write(t, nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty snapshot: %v %v", got, err)
	}
}

// TestCutShortIsRefused: every prefix of a snapshot, and one with bytes
// after its end, is an error, never a smaller table.
func TestCutShortIsRefused(t *testing.T) {
	b := write(t, [][2]string{{"a", "1"}, {"bb", "22"}, {"ccc", ""}})
	for n := range len(b) {
		if _, err := readAll(b[:n]); !errors.Is(err, ErrFormat) {
			t.Fatalf("cut at %d of %d: %v, want ErrFormat", n, len(b), err)
		}
	}
	if _, err := readAll(append(bytes.Clone(b), 0)); !errors.Is(err, ErrFormat) {
		t.Fatalf("trailing byte: %v", err)
	}
	// A count that does not match the records.
	bad := bytes.Clone(b)
	bad[len(bad)-1]++
	if _, err := readAll(bad); !errors.Is(err, ErrFormat) {
		t.Fatalf("wrong count: %v", err)
	}
}

func TestWriterRefusesBadRecords(t *testing.T) {
	for _, key := range []string{"", string(bytes.Repeat([]byte("k"), maxKey+1))} {
		w := NewWriter(io.Discard)
		if err := w.Add(key, nil); err == nil {
			t.Fatalf("key of %d bytes accepted", len(key))
		}
		if err := w.Close(); err == nil {
			t.Fatal("Close after a refused record succeeded")
		}
	}
}

// FuzzReader: any bytes either read as records that, written again, read
// back the same, or fail with ErrFormat; never a panic or a hang.
func FuzzReader(f *testing.F) {
	f.Add(write(f, [][2]string{{"a", "1"}, {"bb", `{"id":"bb"}`}}))
	f.Add(write(f, nil))
	f.Add([]byte(magic))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := readAll(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error not ErrFormat: %v", err)
			}
			return
		}
		again, err := readAll(write(t, recs))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("records written again read back as %d records, %v; want %d", len(again), err, len(recs))
		}
		for i := range recs {
			if again[i] != recs[i] {
				t.Fatalf("record %d changed: %q", i, again[i][0])
			}
		}
	})
}
