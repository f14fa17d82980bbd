package deploy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestBurstsCoalesce(t *testing.T) {
	f := newFixture(t, Config{Workers: 4})
	f.org("acme", "10.0.0.0/16")
	f.settle("acme")
	before := len(f.pub.all())

	gate := make(chan struct{})
	f.pub.mu.Lock()
	f.pub.gate = gate
	f.pub.mu.Unlock()
	for i := range 50 {
		f.put("acme", fmt.Sprintf("10.0.%d.0/24", i), "u", "")
	}
	if st := f.d.Status("acme"); !st.Dirty {
		t.Fatal("not dirty while a deploy is held")
	}
	close(gate)
	st := f.settle("acme")
	if st.Version != 52 || len(st.Ranges) != 51 {
		t.Fatalf("deployed v%d with %d ranges", st.Version, len(st.Ranges))
	}
	// One deploy was running when the burst began; the burst costs at most
	// one more (plus one for a write landing during that one).
	if got := len(f.pub.all()) - before; got > 3 {
		t.Fatalf("50 writes cost %d deploys", got)
	}
}

func TestRetryAndUnconfirmedSessions(t *testing.T) {
	f := newFixture(t, Config{})
	f.org("acme", "10.0.0.0/24")
	f.settle("acme")

	f.pub.setFail(true)
	f.put("acme", "10.0.0.0/25", "ghost", "")
	deadline := time.Now().Add(5 * time.Second)
	for f.pub.callCount() < 3 { // failed attempts, retried with backoff
		if time.Now().After(deadline) {
			t.Fatal("no retries")
		}
		time.Sleep(time.Millisecond)
	}
	if st := f.d.Status("acme"); !st.Dirty || st.DirtySince.IsZero() {
		t.Fatalf("not dirty while failing: %+v", st)
	}
	if age := f.d.sched.oldestDirty(); age <= 0 {
		t.Fatalf("oldest dirty age %v while failing, want > 0", age)
	}
	// The override is withdrawn before the IP Mapper comes back: the
	// session a failed publish may have stored is cleaned anyway.
	if _, err := f.store.DeleteOverride(f.ctx(), "acme", netip.MustParsePrefix("10.0.0.0/25")); err != nil {
		t.Fatal(err)
	}
	f.d.Notify("acme")
	f.pub.setFail(false)
	f.settle("acme")
	if age := f.d.sched.oldestDirty(); age != 0 {
		t.Fatalf("oldest dirty age %v once deployed, want 0", age)
	}
	d := f.pub.last()
	if !slices.Contains(d.CleanIDs, id("acme", "10.0.0.0/25", "ghost")) {
		t.Fatalf("unconfirmed session not cleaned: %+v", d)
	}
}

// TestDeleteSurvivesRestart: a delete whose clean never reached the IP
// Mapper is cleaned by the next orgmanager process, and an organisation
// re-created meanwhile gets a revision above the deleted one's sessions.
func TestDeleteSurvivesRestart(t *testing.T) {
	f := newFixture(t, Config{})
	f.org("acme", "10.0.0.0/24")
	f.org("beta", "10.1.0.0/24")
	f.settle("acme")
	f.settle("beta")
	betaRev := f.pub.all()[1].Revision
	f.pub.setFail(true) // the IP Mapper is gone from here on
	for _, org := range []string{"acme", "beta"} {
		if err := f.store.DeleteOrg(f.ctx(), org); err != nil {
			t.Fatal(err)
		}
		f.d.Notify(org)
	}
	for f.pub.callCount() < 4 {
		time.Sleep(time.Millisecond)
	}
	if _, err := f.store.PutOrg(f.ctx(), "beta"); err != nil {
		t.Fatal(err)
	}

	// The next process (the first one is dead to the IP Mapper).
	pub := &recorder{}
	next, err := New(Config{Store: f.store, Publisher: pub, RetryMin: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); next.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var cleaned, republished bool
		for _, d := range pub.all() {
			cleaned = cleaned || d.Org == "acme" && d.CleanOrg
			republished = republished || d.Org == "beta" && d.CleanBelowRevision > betaRev
		}
		pending, err := f.store.DeletedOrgs(f.ctx())
		if err != nil {
			t.Fatal(err)
		}
		if cleaned && republished && len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart: diffs %+v, pending deletes %+v", pub.all(), pending)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestVersionScanAndFullRedeploy(t *testing.T) {
	f := newFixture(t, Config{VersionCheckInterval: 10 * time.Millisecond, FullRedeployInterval: 50 * time.Millisecond})
	// Written behind the deployer's back (another instance): the scan finds it.
	if _, err := f.store.PutOrg(f.ctx(), "acme"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := f.d.Status("acme")
		if st.Deployed && st.Version == 1 && !st.Dirty {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scan did not deploy: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	rev := f.pub.last().Revision
	for f.pub.last().Revision <= rev {
		if time.Now().After(deadline) {
			t.Fatal("no periodic full redeploy")
		}
		time.Sleep(time.Millisecond)
	}
}
