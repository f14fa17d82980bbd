package activity

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamConfig is the ACTIVITY stream as nodes and collectors declare
// it. Nodes publish batches with their ID as Nats-Msg-Id, so a publish
// retried within the duplicate window is stored once; what no collector
// has taken yet is dropped, oldest first, past MaxAge or MaxBytes — the
// stream is a buffer between nodes and collectors, not the store.
func JetStreamConfig(c StreamConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "svc-pf activity: batches of events and counts from the nodes, for the collectors",
		Subjects:    []string{SubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.MaxAge,
		MaxBytes:    c.MaxBytes,
		Replicas:    c.Replicas,
	}
}

// EnsureStream creates the ACTIVITY stream, or updates its limits to c's:
// whichever of a node or a collector starts first declares it, and both
// declare the same.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, JetStreamConfig(c))
	if err != nil {
		return nil, fmt.Errorf("activity: stream %s: %w", Stream, err)
	}
	return s, nil
}
