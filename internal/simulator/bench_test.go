package simulator

import (
	"context"
	"testing"
)

// BenchmarkSimulateBody is one simulate without HTTP: the request through a
// Lua worker running the default entry file, the built-in and the engine,
// and the body's encoding as the HTTP handler writes it. The fixture is
// small (one session, a two-key feed): it measures the Lua boundary and the
// body, not the read models.
func BenchmarkSimulateBody(b *testing.B) {
	f := newFixture(b, fixtureOpts{workers: 1})
	req, err := ParseSimulate(map[string][]string{"domain": {"www.bad.example"}, "ip": {"10.0.0.2"}, "path": {"/x"}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		v, err := f.svc.Do(ctx, CallSimulateUser, req)
		if err != nil {
			b.Fatal(err)
		}
		if buf, err = AppendBody(buf[:0], CallSimulateUser, v); err != nil {
			b.Fatal(err)
		}
	}
}
