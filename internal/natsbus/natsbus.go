// Package natsbus connects svc-pf services to NATS, the bus between the write
// side (orgmanager, IP Mapper) and the read models on every filter node. It
// starts the embedded NATS server with JetStream that `svc-pf all` and the
// tests use, and opens client connections that reconnect forever, because a
// node must keep serving from its read model while the bus is away; Await
// is how every service waits for its server at start (await.go).
package natsbus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"github.com/svc-pf/svc-pf/internal/filelock"
)

// EmbeddedConfig configures the in-process NATS server.
type EmbeddedConfig struct {
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free port.
	Port int
	// StoreDir holds JetStream's files; required, so state survives restarts.
	StoreDir string
	// ServerName names the server in logs and JetStream metadata.
	ServerName string
	// Logger receives the server's notices and errors; nil discards them.
	Logger *slog.Logger
	// MaxStore bounds JetStream's file storage in bytes; 0: what the disk
	// has (nats-server's default). Tests use it to fill the store.
	MaxStore int64
	// HealInterval is how often a JetStream stuck on a store write error
	// is checked for recovery; default 2s. See Embedded.StoreError.
	HealInterval time.Duration
	// HealMinFree is the free space the store's file system must have
	// before JetStream is restarted after a store write error; default
	// 1 MiB.
	HealMinFree uint64
}

// Embedded is a running in-process NATS server.
type Embedded struct {
	// srv is the running server; heal replaces it (restartServer).
	srv  atomic.Pointer[server.Server]
	opts server.Options // the first server's, with the port it got
	cfg  EmbeddedConfig
	log  *slog.Logger
	lock *filelock.Lock

	// storeErr is the last store write error nats-server reported (its
	// log is the only place it says so), cleared once JetStream was
	// restarted over the store.
	storeErr atomic.Pointer[string]
	stop     chan struct{}
	healer   sync.WaitGroup
	shutOnce sync.Once
}

// StartEmbedded starts a NATS server with JetStream and waits until it
// accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsbus: StoreDir is required for JetStream")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// A busy port would only show as a server never ready, after the
		// wait below: say so at once, naming the address.
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("natsbus: cannot listen on %s for the embedded NATS server: %w (is another svc-pf or NATS server running? set nats.listen)", addr, err)
		}
		_ = l.Close()
	}
	name := cfg.ServerName
	if name == "" {
		name = "svc-pf"
	}
	if cfg.HealInterval <= 0 {
		cfg.HealInterval = 2 * time.Second
	}
	if cfg.HealMinFree == 0 {
		cfg.HealMinFree = 1 << 20
	}
	// nats-server does not lock its store: a second server over the same
	// directory would start and both would write the same stream files.
	lock, err := filelock.Dir(cfg.StoreDir, "JetStream store directory")
	if err != nil {
		return nil, fmt.Errorf("natsbus: %w", err)
	}
	opts := &server.Options{
		ServerName:        name,
		Host:              cfg.Host,
		Port:              port,
		JetStream:         true,
		StoreDir:          cfg.StoreDir,
		JetStreamMaxStore: cfg.MaxStore,
		NoSigs:            true,
		// No HTTP monitoring port: svc-pf exposes its own metrics.
		HTTPPort: 0,
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Embedded{opts: *opts, cfg: cfg, log: log.With("component", "nats-server"), lock: lock, stop: make(chan struct{})}
	srv, err := e.startServer()
	if err != nil {
		_ = lock.Unlock()
		return nil, err
	}
	e.srv.Store(srv)
	// A restart (heal) listens where clients already connect.
	e.opts.Port = e.Port()
	e.healer.Go(e.heal)
	return e, nil
}

// startServer starts a server with e.opts and waits until it accepts
// connections.
func (e *Embedded) startServer() (*server.Server, error) {
	opts := e.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return nil, fmt.Errorf("natsbus: %w", err)
	}
	// Always installed, even without a Logger: the server's log is where
	// it reports a store write error, which the healer watches for.
	srv.SetLoggerV2(&serverLog{log: e.log, onStoreError: e.noteStoreError}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("natsbus: embedded server not ready after 15s")
	}
	return srv, nil
}

// StoreError reports the store write error JetStream is stuck on (nil when
// none): after a write fails on the disk (no space left on device, an I/O
// error), nats-server keeps that error on the stream and refuses — without
// even an error reply, so clients only see timeouts — every later write,
// also once space is free again, until the stream is reopened. The
// embedded server reopens it itself (see heal); this says why writes fail
// meanwhile (svc-pf all's IP Mapper reports it on /health).
func (e *Embedded) StoreError() error {
	if p := e.storeErr.Load(); p != nil {
		return errors.New(*p)
	}
	if !e.srv.Load().JetStreamEnabled() {
		return errors.New("JetStream is disabled")
	}
	return nil
}

func (e *Embedded) noteStoreError(msg string) {
	if e.storeErr.Load() == nil {
		e.log.Error("JetStream store write failed; writes fail until it is restarted, which happens once the disk has free space again", "err", msg)
	}
	e.storeErr.Store(&msg)
}

// heal restarts the server (JetStream reopens every stream from its files,
// which clears the stuck write error) once the store has room again, or
// when the server disabled JetStream on its own (out of space in some
// paths, permission denied). Without it a freed disk is only picked up by a
// restart of the process. The whole server is restarted, not JetStream
// alone: nats-server's EnableJetStream on a running server races with the
// JetStream API requests it is serving (the race detector shows it). The
// clients reconnect, as they do to any restarted server.
func (e *Embedded) heal() {
	t := time.NewTicker(e.cfg.HealInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		if e.storeErr.Load() == nil && e.srv.Load().JetStreamEnabled() {
			continue
		}
		free, err := freeBytes(e.cfg.StoreDir)
		if err != nil || free < e.cfg.HealMinFree {
			continue
		}
		if err := e.restartServer(); err != nil {
			e.log.Warn("restarting the server after a store write error failed; retrying", "err", err)
			continue
		}
		e.storeErr.Store(nil)
		e.log.Info("server restarted after a store write error; writes resume", "free_bytes", free)
	}
}

// restartServer stops the server and starts a new one on the same address
// and store. Called only from heal; Shutdown waits for heal to return
// before it stops the server.
func (e *Embedded) restartServer() error {
	old := e.srv.Load()
	old.Shutdown()
	old.WaitForShutdown()
	select {
	case <-e.stop: // shutting down: leave it off
		return errors.New("server shutting down")
	default:
	}
	srv, err := e.startServer()
	if err != nil {
		return err // heal tries again: the stopped server reports JetStream disabled
	}
	e.srv.Store(srv)
	return nil
}

func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// ClientURL is the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.Load().ClientURL() }

// Port is the listening port: how a program that embeds the server learns
// the port the kernel chose for Port 0, e.g. to restart a server on the
// same address.
func (e *Embedded) Port() int {
	_, p, err := net.SplitHostPort(e.srv.Load().Addr().String())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Shutdown stops the server, waits until it is down and releases its
// store directory.
func (e *Embedded) Shutdown() {
	e.shutOnce.Do(func() {
		close(e.stop)
		e.healer.Wait()
		srv := e.srv.Load()
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = e.lock.Unlock()
	})
}

// Connect opens a client connection that keeps reconnecting, logging each
// disconnect and reconnect. The first connection attempt must succeed unless
// retryOnFailedConnect is set, in which case it too retries in the background.
//
// While the connection is down (or not up yet), publishes and requests fail
// at once with nats.ErrReconnectBufExceeded instead of being buffered.
//
// url may list several servers of a cluster, comma-separated: the client
// picks one at random and fails over to the others (and to those the
// cluster announces). more are further options after these, e.g.
// nats.DontRandomize() for a test that must know which server a client is on.
func Connect(url, name string, log *slog.Logger, retryOnFailedConnect bool, more ...nats.Option) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		// 250ms doubling to 2s between rounds over the servers (await.go).
		nats.CustomReconnectDelay(reconnectDelay),
		nats.RetryOnFailedConnect(retryOnFailedConnect),
		// No reconnect buffer. nats.go's default keeps up to 8 MB of
		// publishes made during a disconnect and sends them after the
		// reconnect, by which time the caller has already seen its request
		// fail (an ack or reply that never came): a KV write the IP Mapper
		// reported as failed, and left out of its table, would then land in
		// the bucket and reach every node. Failing at once keeps "failed"
		// meaning "not written"; every caller retries its writes and
		// requests anyway.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if c.IsClosed() || err == nil {
				// Our own Close at shutdown: nothing for an operator to do.
				log.Debug("NATS connection closed")
				return
			}
			log.Warn("NATS disconnected; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("NATS async error", "subject", subj, "err", err)
		}),
	}
	nc, err := nats.Connect(url, append(opts, more...)...)
	if err != nil {
		return nil, fmt.Errorf("natsbus: connect %s: %w", url, err)
	}
	return nc, nil
}

// serverLog adapts nats-server's logger to slog, and passes the store
// write errors it reports to onStoreError.
type serverLog struct {
	log          *slog.Logger
	onStoreError func(string)
}

// isStoreWriteError matches what nats-server logs when a stream's store
// fails a write ("Filestore [KV_x] Critical write error: …", "JetStream
// stream '$G > KV_x' critical write error: …") or when it gives JetStream
// up for lack of space ("JetStream out of space, will be DISABLED"). Its
// API reports neither; this text is stable across 2.10–2.15.
func isStoreWriteError(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "critical write error") || strings.Contains(m, "no space left") ||
		strings.Contains(m, "out of space") || strings.Contains(m, "out of resources, will be disabled")
}

func (l *serverLog) errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	if l.onStoreError != nil && isStoreWriteError(msg) {
		l.onStoreError(msg)
	}
}

func (l *serverLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLog) Fatalf(format string, v ...any)  { l.errorf(format, v...) }
func (l *serverLog) Errorf(format string, v ...any)  { l.errorf(format, v...) }
func (l *serverLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any)  {}

// Unreachable explains err when it means that nc could not send because it
// is not connected to any server: nats.go then reports a symptom (with no
// reconnect buffer, "outbound buffer limit exceeded") that names neither the
// server nor what is waiting for it. The error names the servers and what
// the caller waits to do, and still wraps err. Any other error (and nil) is
// returned as it is.
func Unreachable(nc *nats.Conn, err error, waiting string) error {
	if err == nil || !(errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrNoServers)) {
		return err
	}
	return fmt.Errorf("NATS at %s unreachable; waiting to reconnect to %s: %w", servers(nc), waiting, err)
}

// NotConnected returns nil while nc is connected and knows the server's
// maximum payload, and otherwise an error naming the servers and the
// connection's state. Checked before a request, it says why the request
// cannot reach anyone, where nats.go would name a symptom: with no
// connection yet the client knows no maximum payload, so every message is
// "too big", and during a reconnect a request fails with "outbound buffer
// limit exceeded".
func NotConnected(nc *nats.Conn) error {
	if nc.IsConnected() && nc.MaxPayload() > 0 {
		return nil
	}
	status := strings.ToLower(nc.Status().String())
	if nc.Status() == nats.RECONNECTING && nc.ConnectedUrl() == "" {
		status = "connecting"
	}
	return fmt.Errorf("not connected to NATS at %s (%s)", servers(nc), status)
}

// servers lists the servers nc knows, configured and discovered, as
// scheme://host:port (nats.go keeps no credentials in them).
func servers(nc *nats.Conn) string {
	if s := nc.Servers(); len(s) > 0 {
		return strings.Join(s, ",")
	}
	return "(no server)"
}
