package mapperclient

import (
	"context"
	"fmt"

	"github.com/svc-pf/svc-pf/internal/deploy"
)

// Publisher is the orgmanager's deploy.Publisher when an IP Mapper is
// configured: it sends each diff over Client.
type Publisher struct {
	Client *Client
}

var _ deploy.Publisher = Publisher{}

// Publish sends one diff: the sets first, so that an address never falls
// between an old session and the new one, then the cleans.
func (p Publisher) Publish(ctx context.Context, d deploy.Diff) error {
	if len(d.Set) > 0 {
		if _, err := p.Client.SetSessionBatch(ctx, d.Set); err != nil {
			return fmt.Errorf("set-session-batch: %w", err)
		}
	}
	for _, c := range cleanRequests(&d) {
		if _, err := p.Client.CleanSessions(ctx, c); err != nil {
			return fmt.Errorf("clean-sessions: %w", err)
		}
	}
	return nil
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
