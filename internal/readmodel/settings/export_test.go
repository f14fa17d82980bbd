package settingsmodel

import "time"

// Lag is how stale the current snapshot may be (readmodel.Follower.Lag):
// the tests' view of the follower, which the node reads through its own
// metrics instead.
func (m *Model) Lag() time.Duration { return m.follower.Lag() }
