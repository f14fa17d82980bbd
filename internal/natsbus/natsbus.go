// Package natsbus connects svc-pf services to NATS, the bus between the write
// side (orgmanager, IP Mapper) and the read models on every filter node. It
// starts the embedded NATS server with JetStream that `svc-pf all` and the
// tests use, and opens client connections that reconnect forever, because a
// node must keep serving from its read model while the bus is away.
package natsbus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
}

// Embedded is a running in-process NATS server.
type Embedded struct {
	srv *server.Server
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
	opts := &server.Options{
		ServerName: name,
		Host:       cfg.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		// No HTTP monitoring port: svc-pf exposes its own metrics.
		HTTPPort: 0,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsbus: %w", err)
	}
	if cfg.Logger != nil {
		srv.SetLoggerV2(&serverLog{log: cfg.Logger.With("component", "nats-server")}, false, false, false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("natsbus: embedded server not ready after 15s")
	}
	return &Embedded{srv: srv}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Port is the listening port, to restart a server on the same address.
func (e *Embedded) Port() int {
	_, p, err := net.SplitHostPort(e.srv.Addr().String())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Shutdown stops the server and waits until it is down.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// Connect opens a client connection that keeps reconnecting, logging each
// disconnect and reconnect. The first connection attempt must succeed unless
// retryOnFailedConnect is set, in which case it too retries in the background.
//
// While the connection is down (or not up yet), publishes and requests fail
// at once with nats.ErrReconnectBufExceeded instead of being buffered.
func Connect(url, name string, log *slog.Logger, retryOnFailedConnect bool) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
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
	)
	if err != nil {
		return nil, fmt.Errorf("natsbus: connect %s: %w", url, err)
	}
	return nc, nil
}

// serverLog adapts nats-server's logger to slog.
type serverLog struct{ log *slog.Logger }

func (l *serverLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLog) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLog) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any)  {}
