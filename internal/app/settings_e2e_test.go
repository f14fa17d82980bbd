package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// TestSettingsDeployEndToEnd: settings written over REST reach the settings
// bucket under their keys, as canonical documents; a changed document is
// rewritten, a deleted one removed, the global layer has its key, and
// deleting the organisation removes all of its documents.
func TestSettingsDeployEndToEnd(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		testSettingsDeploy(t, newPlatform(t, storetest.URL(t, dialect)))
	})
}

func testSettingsDeploy(t *testing.T, p *platform) {
	js, err := jetstream.New(p.connect("settings reader"))
	if err != nil {
		t.Fatal(err)
	}
	bucket := func() map[string]string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out := map[string]string{}
		kv, err := js.KeyValue(ctx, settings.Bucket)
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
		kl, err := kv.ListKeys(ctx)
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
		for k := range kl.Keys() {
			e, err := kv.Get(ctx, k)
			if err == nil {
				out[k] = string(e.Value())
			}
		}
		return out
	}
	expect := func(what string, want map[string]string) {
		t.Helper()
		p.eventually(what, func() bool {
			got := bucket()
			if len(got) != len(want) {
				return false
			}
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}, func() string { return fmt.Sprintf("bucket %v, want %v", bucket(), want) })
	}
	alice := settings.Key("acme", settings.Scope{Kind: settings.ScopeUsername, Value: "alice"})
	org := settings.Key("acme", settings.Scope{Kind: settings.ScopeOrg})

	p.call("PUT", "/org/acme", nil, 200)
	p.call("PUT", "/org/acme/settings?username=alice", map[string]any{"blocked_categories": []int{3, 1}}, 200)
	p.call("PUT", "/org/acme/settings", map[string]any{"safe_search": true}, 200)
	expect("alice's and the org's documents", map[string]string{
		alice: `{"blocked_categories":[1,3]}`, org: `{"safe_search":true}`})

	p.call("PUT", "/org/acme/settings?username=alice", map[string]any{"paused": true}, 200)
	p.call("PUT", "/settings", map[string]any{"blocklist": []string{"Bad.Example"}}, 200)
	expect("alice's new document and the global one", map[string]string{
		alice: `{"paused":true}`, org: `{"safe_search":true}`, settings.GlobalKey: `{"blocklist":["bad.example"]}`})

	p.call("DELETE", "/org/acme/settings", nil, 204)
	expect("the org's document removed", map[string]string{
		alice: `{"paused":true}`, settings.GlobalKey: `{"blocklist":["bad.example"]}`})

	p.call("DELETE", "/org/acme?confirm=true", nil, 204)
	p.call("DELETE", "/settings", nil, 204)
	expect("nothing left", map[string]string{})
}
