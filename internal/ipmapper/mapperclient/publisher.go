package mapperclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// Publisher is the orgmanager's deploy.Publisher when an IP Mapper is
// configured: it sends each diff over Client. An error that means no IP
// Mapper answered is a deploy.ErrUnreachable naming why (Unreachable).
type Publisher struct {
	Client *Client
}

var _ deploy.Publisher = Publisher{}

// Publish sends one diff: the sets first, so that an address never falls
// between an old session and the new one, then the cleans.
func (p Publisher) Publish(ctx context.Context, d deploy.Diff) error {
	if err := p.Client.notConnected(); err != nil {
		return err
	}
	return p.Client.unreachable(p.publish(ctx, &d), "deploy to the IP Mapper")
}

func (p Publisher) publish(ctx context.Context, d *deploy.Diff) error {
	if len(d.Set) > 0 {
		if _, err := p.Client.SetSessionBatch(ctx, d.Set); err != nil {
			return fmt.Errorf("set-session-batch: %w", err)
		}
	}
	for _, c := range cleanRequests(d) {
		if _, err := p.Client.CleanSessions(ctx, c); err != nil {
			return fmt.Errorf("clean-sessions: %w", err)
		}
	}
	return nil
}

// Ping asks the IP Mapper for a session no one has: any answer, even a
// refusal, shows it listening (deploy.Config.Ping). It goes through the
// client, so it follows the subjects the deploys use.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.notConnected(); err != nil {
		return err
	}
	_, err := c.GetSessions(ctx, Query{ID: "orgmanager-health-probe"})
	return c.unreachable(err, "ask the IP Mapper")
}

// notConnected is a deploy.ErrUnreachable while the connection is down:
// nothing can be asked then, and nats.go would name a symptom (with no
// connection yet every session was "more than one NATS message can
// carry"; during a reconnect, "outbound buffer limit exceeded").
func (c *Client) notConnected() error {
	if err := natsbus.NotConnected(c.nc); err != nil {
		return fmt.Errorf("%w: %w", deploy.ErrUnreachable, err)
	}
	return nil
}

// unreachable marks err as deploy.ErrUnreachable, naming the NATS servers
// when the connection dropped (natsbus.Unreachable), when it means that no
// IP Mapper answered; any other error is an answer (a refusal, a failure
// of the IP Mapper) and stays as it is.
func (c *Client) unreachable(err error, waiting string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnavailable), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("%w: %w", deploy.ErrUnreachable, natsbus.Unreachable(c.nc, err, waiting))
	}
	return err
}

// cleanRequests is one request per clean field the diff sets: a request
// carries a single selector.
func cleanRequests(d *deploy.Diff) []CleanRequest {
	var cleans []CleanRequest
	if len(d.CleanIDs) > 0 {
		cleans = append(cleans, CleanRequest{Org: d.Org, IDs: d.CleanIDs})
	}
	if len(d.CleanSubnets) > 0 {
		cleans = append(cleans, CleanRequest{Org: d.Org, Subnets: d.CleanSubnets})
	}
	if d.CleanBelowRevision > 0 {
		cleans = append(cleans, CleanRequest{Org: d.Org, RevisionBelow: d.CleanBelowRevision})
	}
	if d.CleanOrg {
		cleans = append(cleans, CleanRequest{Org: d.Org, All: true})
	}
	return cleans
}
