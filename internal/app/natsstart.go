package app

import (
	"context"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// connectBus opens a standalone service's NATS connection the way every
// service does (natsbus/await.go): the first attempt may fail, the
// connection keeps trying with a growing delay, and the returned Await
// logs "waiting for NATS at <url>" and tells /health so (its Err) until
// the server first answers; the service starts meanwhile and does what
// needs NATS once the Await is Done. url may list servers, comma-separated;
// their passwords are hidden wherever it is shown.
func connectBus(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, *natsbus.Await, error) {
	nc, err := natsbus.Connect(url, name, log, true)
	if err != nil {
		return nil, nil, err
	}
	aw, err := natsbus.NewAwait(ctx, natsbus.AwaitConfig{Conn: nc, URL: redactURLs(url), Logger: log})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, aw, nil
}

// redactURLs is redactURL for each of a comma-separated list of URLs.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		parts[i] = redactURL(strings.TrimSpace(u))
	}
	return strings.Join(parts, ",")
}

// awaitDone returns once aw is Done (at once for nil: no NATS, or one
// that is up) or ctx ends; false when ctx ended first.
func awaitDone(ctx context.Context, aw *natsbus.Await) bool {
	if aw == nil {
		return true
	}
	select {
	case <-aw.Done():
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}
