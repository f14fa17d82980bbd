// Command sessions measures the sessions path at scale: N RADIUS-shaped
// sessions (a /32 or a /64 each, a username and an msisdn device id,
// producer "radius") written through a real IP Mapper's set-session-batch
// into a real nats-server (JetStream, file storage), then the IP Mapper's
// resident memory, the load rate, and a node read model's cold start (a
// fresh process that reads the bucket until ready) and resident memory.
// It is a harness, not part of svc-pf; bench/sessions.sh runs it.
//
//	sessions run [-n N] [-nats-server PATH] [-dir DIR] [-node-runs K]
//	sessions ipmapper -nats URL     (a child: the IP Mapper, prints "ready")
//	sessions node -nats URL         (a child: a node's sessions read model, prints "ready <n> <seconds>")
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	"github.com/svc-pf/svc-pf/internal/session"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sessions run|ipmapper|node …")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runBench(os.Args[2:])
	case "ipmapper":
		err = runIPMapper(os.Args[2:])
	case "node":
		err = runNode(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sessions:", err)
		os.Exit(1)
	}
}

// radiusSession is session i of the benchmark: what RADIUS accounting
// writes for one mobile subscriber. Even i: an IPv4 /32 in 100.64.0.0/10
// (and 10.0.0.0/8 past 4M); odd i: an IPv6 /64 in 2a02:1234::/32. The id is
// 32 hex digits (a hash, as RADIUS's ids of Acct-Session-Id are), the
// username the MSISDN, the device id msisdn:<MSISDN>; 20 organisations.
func radiusSession(i int) session.Session {
	msisdn := fmt.Sprintf("4479%08d", i)
	var p netip.Prefix
	if i%2 == 0 {
		v := uint32(i / 2)
		var b [4]byte
		if v < 1<<22 {
			binary.BigEndian.PutUint32(b[:], 100<<24|64<<16+v)
		} else {
			binary.BigEndian.PutUint32(b[:], 10<<24+v-1<<22)
		}
		p = netip.PrefixFrom(netip.AddrFrom4(b), 32)
	} else {
		var b [16]byte
		b[0], b[1], b[2], b[3] = 0x2a, 0x02, 0x12, 0x34
		binary.BigEndian.PutUint32(b[4:8], uint32(i/2))
		p = netip.PrefixFrom(netip.AddrFrom16(b), 64)
	}
	return session.Session{
		ID:          fmt.Sprintf("%016x%016x", uint64(i)*0x9e3779b97f4a7c15, uint64(i)),
		Org:         fmt.Sprintf("mobile-%02d", i%20),
		Allocations: []netip.Prefix{p},
		Attributes:  identity.Attributes{Username: msisdn, DeviceID: "msisdn:" + msisdn},
		Producer:    session.ProducerRADIUS,
	}
}

func runBench(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	n := fs.Int("n", 10_000_000, "sessions to load")
	server := fs.String("nats-server", "nats-server", "the nats-server binary")
	dir := fs.String("dir", "", "work directory (default: a new temporary one, removed at the end)")
	nodeRuns := fs.Int("node-runs", 2, "node cold starts to measure")
	batch := fs.Int("batch", 20_000, "sessions per SetSessionBatch call")
	from := fs.Int("from", 0, "with -dir: the bucket there holds sessions 0 to from-1 already (a load cut short); load the rest")
	keepSnap := fs.Bool("keep-snapshot", false, "with -skip-load: neither write a snapshot nor remove one; the nodes start from the one a previous run wrote")
	snap := fs.Bool("snapshot", true, "have the IP Mapper write its snapshot before the node cold starts (with -skip-load: restart an IP Mapper on the kept store for it); false removes any snapshot, so that the nodes replay the stream")
	skipLoad := fs.Bool("skip-load", false, "the bucket in -dir holds the sessions already (a previous run with -dir): measure the cold starts only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "svcpf-sessions-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	} else if !*skipLoad && *from == 0 {
		if _, err := os.Stat(filepath.Join(*dir, "js")); err == nil {
			return fmt.Errorf("%s/js exists: remove it, or measure it with -skip-load", *dir)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	srv := exec.Command(*server, "-js", "-sd", filepath.Join(*dir, "js"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	srvLog, err := os.Create(filepath.Join(*dir, "nats-server.log"))
	if err != nil {
		return err
	}
	srv.Stdout, srv.Stderr = srvLog, srvLog
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start %s: %w", *server, err)
	}
	defer func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() }()
	nc, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()

	srvPid := srv.Process.Pid
	if *keepSnap {
		*snap = false
	} else if !*snap {
		// Nodes replay the whole stream: no snapshot of an earlier run.
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		if err := js.DeleteObjectStore(context.Background(), session.Bucket); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("remove the snapshot: %w", err)
		}
	}
	if *skipLoad {
		if *snap {
			// A fresh snapshot of the kept store: the IP Mapper's restart
			// (it reloads its table), then its snapshot.
			mapper, err := restartMapper(self, url)
			if err != nil {
				return err
			}
			defer stopChild(mapper.cmd)
			if err := snapshot(mapper); err != nil {
				return err
			}
		}
		return coldStarts(self, url, *nodeRuns, srvPid)
	}
	mapper, _, err := startChild(self, "ipmapper", url)
	if err != nil {
		return err
	}
	defer func() {
		if mapper != nil { // nil when its restart failed
			stopChild(mapper.cmd)
		}
	}()
	client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	fmt.Printf("loading %d sessions through set-session-batch (%d a call)\n", *n, *batch)
	ctx := context.Background()
	start := time.Now()
	buf := make([]session.Session, 0, *batch)
	step := max(*n/10, 1)
	for i := *from; i < *n; {
		buf = buf[:0]
		for ; i < *n && len(buf) < *batch; i++ {
			buf = append(buf, radiusSession(i))
		}
		if stored, err := client.SetSessionBatch(ctx, buf); err != nil || stored != len(buf) {
			return fmt.Errorf("set-session-batch at %d: stored %d of %d: %w", i, stored, len(buf), err)
		}
		if i%step < *batch || i == *n {
			el := time.Since(start)
			fmt.Printf("  %9d  %6.1fs  %7.0f sessions/s  IP Mapper RSS %s\n", i, el.Seconds(), float64(i)/el.Seconds(), mib(rss(mapper.cmd.Process.Pid, "VmRSS")))
		}
	}
	took := time.Since(start)
	fmt.Printf("loaded %d sessions in %.1fs: %.0f sessions/s\n", *n, took.Seconds(), float64(*n)/took.Seconds())
	fmt.Printf("IP Mapper: RSS %s, peak %s\n", mib(rss(mapper.cmd.Process.Pid, "VmRSS")), mib(rss(mapper.cmd.Process.Pid, "VmHWM")))
	if du, err := dirSize(filepath.Join(*dir, "js")); err == nil {
		fmt.Printf("JetStream store: %s on disk\n", mib(du/1024))
	}

	if *snap {
		if err := snapshot(mapper); err != nil {
			return err
		}
	}
	if err := coldStarts(self, url, *nodeRuns, srvPid); err != nil {
		return err
	}
	// The IP Mapper's own restart: it reloads its table from the bucket.
	stopChild(mapper.cmd)
	mapper, err = restartMapper(self, url)
	return err
}

// restartMapper starts an IP Mapper on the bucket as it is (it reloads its
// table from it) and reports how long that took and its memory.
func restartMapper(self, url string) (*child, error) {
	began := time.Now()
	mapper, _, err := startChild(self, "ipmapper", url)
	if err != nil {
		return nil, err
	}
	fmt.Printf("IP Mapper restart: ready in %.1fs, RSS %s, peak %s\n", time.Since(began).Seconds(),
		mib(rss(mapper.cmd.Process.Pid, "VmRSS")), mib(rss(mapper.cmd.Process.Pid, "VmHWM")))
	return mapper, nil
}

// snapshot has the IP Mapper write its snapshot (SIGUSR1) and reports it.
func snapshot(mapper *child) error {
	began := time.Now()
	if err := mapper.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return err
	}
	select {
	case line, ok := <-mapper.lines:
		if !ok || !strings.HasPrefix(line, "snapshot ") {
			return fmt.Errorf("IP Mapper snapshot: %q", line)
		}
		fmt.Printf("IP Mapper snapshot: %s, in %.1fs; IP Mapper RSS %s, peak %s\n", strings.TrimPrefix(line, "snapshot "),
			time.Since(began).Seconds(), mib(rss(mapper.cmd.Process.Pid, "VmRSS")), mib(rss(mapper.cmd.Process.Pid, "VmHWM")))
		return nil
	case <-time.After(30 * time.Minute):
		return errors.New("IP Mapper snapshot: no answer in 30 minutes")
	}
}

// coldStarts measures nodeRuns node cold starts.
func coldStarts(self, url string, nodeRuns int, srvPid int) error {
	for run := 1; run <= nodeRuns; run++ {
		began := time.Now()
		srvCPU := cpuSeconds(srvPid)
		node, ready, err := startChild(self, "node", url)
		if err != nil {
			return err
		}
		took := time.Since(began)
		// The CPU time each side spent: on a shared machine the wall time
		// alone does not say whether the server or the node was the bound.
		fmt.Printf("node cold start %d: ready in %.1fs (%s), RSS %s, peak %s; CPU: node %.1fs, nats-server %.1fs\n", run, took.Seconds(), ready,
			mib(rss(node.cmd.Process.Pid, "VmRSS")), mib(rss(node.cmd.Process.Pid, "VmHWM")),
			cpuSeconds(node.cmd.Process.Pid), cpuSeconds(srvPid)-srvCPU)
		stopChild(node.cmd)
	}
	return nil
}

// child is a running child of this program and the lines it prints after
// "ready".
type child struct {
	cmd   *exec.Cmd
	lines chan string
}

// startChild runs this program in mode and waits for its "ready" line.
func startChild(self, mode, url string) (*child, string, error) {
	cmd := exec.Command(self, mode, "-nats", url)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("%s did not get ready: %q %v", mode, line, err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case c.lines <- strings.TrimSpace(l):
			default: // nobody asked
			}
		}
	}()
	return c, strings.TrimSpace(line), nil
}

func stopChild(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}

func connect(url string) (*nats.Conn, error) {
	// Long enough for a server to restore a store of millions of messages
	// (at 10M: over 10 s) before it listens.
	var err error
	for range 6000 {
		var nc *nats.Conn
		if nc, err = natsbus.Connect(url, "sessions-bench", nil, false); err == nil {
			return nc, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("connect %s: %w", url, err)
}

func runIPMapper(args []string) error {
	fs := flag.NewFlagSet("ipmapper", flag.ContinueOnError)
	url := fs.String("nats", "", "NATS URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := connect(*url)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The longest lock TTL: a two-core machine saturated by the load must
	// not lose the lock (and the load) to a refresh that came late.
	// A long write timeout too: on a loaded machine 5 s was not enough
	// for a batch's acks, and the load stopped.
	// SnapshotInterval: none of its own; the harness asks for one (SIGUSR1).
	svc, err := ipmapper.New(ipmapper.Config{Conn: nc, Registerer: prometheus.NewRegistry(), LockTTL: time.Minute, WriteTimeout: time.Minute,
		SnapshotInterval: -1,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		return err
	}
	// Before "ready": the harness may signal as soon as it reads it, and a
	// SIGUSR1 that comes before Notify is dropped.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	fmt.Println("ready")
	for {
		select {
		case <-ctx.Done():
			return svc.Stop()
		case <-usr1:
			seq, err := svc.WriteSnapshot(ctx)
			if err != nil {
				fmt.Printf("snapshot failed: %v\n", err)
				continue
			}
			fmt.Printf("snapshot sequence %d\n", seq)
		}
	}
}

func runNode(args []string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	url := fs.String("nats", "", "NATS URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start := time.Now()
	if path := os.Getenv("SESSIONS_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	nc, err := connect(*url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	m, err := sessions.New(sessions.Config{JetStream: js,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if err := m.WaitReady(ctx); err != nil {
		return err
	}
	pprof.StopCPUProfile()
	fmt.Printf("ready %d sessions, %.1fs in-process\n", m.Snapshot().Len(), time.Since(start).Seconds())
	<-ctx.Done()
	<-done
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// rss reads a kB field of /proc/PID/status (VmRSS, VmHWM).
func rss(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return -1
}

// cpuSeconds is the user and system CPU time process pid has used so far
// (/proc/PID/stat), or -1.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are the 12th and 13th of them.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

func mib(kb int64) string { return fmt.Sprintf("%.0f MiB", float64(kb)/1024) }

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	return n, err
}
