// Command recursorlab runs the recursor tests' DNS lab (internal/dnslab's
// standard lab: nsd servers for a signed root, TLDs and signed zones on
// 127.53.N.0/24, port 53) outside go test, for bench/recursor.sh: the
// resolvers benchmarked there resolve against the same zones, root hints
// and trust anchor as the tests and the validator's lab comparison.
//
// It writes into -out: root.hints (zone-file text, as named.root),
// root.anchor (the root's DS) and lab.env (shell assignments: LAB_NET, the
// lab's /24 as its first three octets, and LAB_<SERVER>, each server's
// address), then prints "ready" and serves until SIGINT, SIGTERM or its
// standard input closes, when it stops the servers and removes its
// temporary files. Needs root (port 53 on 127.53.N.x), nsd and ldnsutils.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/svc-pf/svc-pf/internal/dnslab"
)

func main() {
	out := flag.String("out", "", "directory for root.hints, root.anchor and lab.env (required)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "recursorlab: -out DIR is required")
		os.Exit(2)
	}
	o := &owner{}
	code := run(o, *out)
	o.done()
	os.Exit(code)
}

func run(o *owner, out string) (code int) {
	// Fatal ends run through a panic so that the servers already started
	// are stopped (owner.done) before the program exits.
	defer func() {
		if r := recover(); r != nil {
			if _, isFatal := r.(fatal); !isFatal {
				panic(r)
			}
			code = 1
		}
	}()
	desc := dnslab.Standard()
	lab := dnslab.Start(o, desc)
	env := []string{fmt.Sprintf("LAB_NET=%s", strings.TrimSuffix(lab.Net.Addr().String(), ".0"))}
	names := make([]string, 0, len(desc.Servers))
	for _, s := range desc.Servers {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		env = append(env, fmt.Sprintf("LAB_%s=%s", strings.ToUpper(n), lab.Addr(n)))
	}
	files := map[string]string{
		"root.hints":  lab.Hints,
		"root.anchor": lab.TrustAnchor + "\n",
		"lab.env":     strings.Join(env, "\n") + "\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(out, name), []byte(text), 0o644); err != nil {
			o.Fatal(err)
		}
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-sig:
	case <-eof:
	}
	return 0
}

// fatal is the panic value of owner.Fatal.
type fatal struct{}

// owner stands in for the test that owns a lab (dnslab.TB): failures are
// printed and end the program, cleanups run in reverse order at the end.
type owner struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
	temps    []string
}

func (o *owner) Helper() {}

func (o *owner) Cleanup(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cleanups = append(o.cleanups, f)
}

func (o *owner) Failed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}

func (o *owner) Fatal(args ...any) {
	o.fail(fmt.Sprint(args...))
}

func (o *owner) Fatalf(format string, args ...any) {
	o.fail(fmt.Sprintf(format, args...))
}

func (o *owner) fail(msg string) {
	o.mu.Lock()
	o.failed = true
	o.mu.Unlock()
	fmt.Fprintln(os.Stderr, "recursorlab:", msg)
	panic(fatal{})
}

func (o *owner) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func (o *owner) TempDir() string {
	d, err := os.MkdirTemp("", "svcpf-recursorlab-")
	if err != nil {
		o.Fatal(err)
	}
	o.mu.Lock()
	o.temps = append(o.temps, d)
	o.mu.Unlock()
	return d
}

// done runs the cleanups, last added first, then removes the temporary
// directories.
func (o *owner) done() {
	o.mu.Lock()
	cs, temps := o.cleanups, o.temps
	o.cleanups, o.temps = nil, nil
	o.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
	for _, d := range temps {
		_ = os.RemoveAll(d)
	}
}
