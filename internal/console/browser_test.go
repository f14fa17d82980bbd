package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/svc-pf/svc-pf/internal/console"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
)

// findChromium returns Debian's chromium (or another Chrome the machine
// has). The browser test does not skip without one: CI installs it.
func findChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium found for the console's browser test: install it (apt-get install -y chromium; .ci/run does)")
	return ""
}

// TestBrowser drives the console in a real browser through what a person
// does: sign in, create an organisation, a prefix, an override and the
// settings of its username blocking a category, read the effective view
// and the "why" page, see a scoped token refused another organisation,
// sign out, and a form sent without its CSRF token refused. With
// SVCPF_CONSOLE_SCREENSHOTS=DIR it saves screenshots of the main pages
// there (docs/console/*.png).
func TestBrowser(t *testing.T) {
	exe := findChromium(t)
	shots := os.Getenv("SVCPF_CONSOLE_SCREENSHOTS")
	// One node beats into a real bucket, for the Nodes page.
	bus := natstest.Start(t)
	ann, err := nodehealth.NewAnnouncer(nodehealth.AnnouncerConfig{NATS: bus.NC, Name: "dns1-resolver", Services: []string{"resolver"},
		Version: "v1", Interval: time.Hour, Snapshot: func() nodehealth.Snapshot {
			return nodehealth.Snapshot{Feeds: []nodehealth.Feed{{Name: "threats", Version: 41, LoadedAt: time.Now()}}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	natstest.Background(t, ann.Run)
	// The activity store: real day files, written as the collector would.
	fa := storedActivity(t, time.Now().UTC())
	e := newEnv(t, openSQLite(t), func(c *console.Config) { c.Nodes = bucketNodes{bus.JS}; c.Activity = fa })

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	expect := func(sel, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			// A page may still be loading (a form's answer): its reads
			// fail until it is there.
			got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			if err == nil && strings.Contains(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q lacks %q (%v)", sel, got, want, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(what, form string) {
		t.Helper()
		run(what, chromedp.Click(form+` button[type=submit]`))
	}
	signIn := func(secret string) {
		t.Helper()
		run("sign-in page", chromedp.Navigate(e.base+"/ui/orgs"), chromedp.WaitVisible(chromedp.CSS(`#token`)))
		run("type the token", chromedp.SendKeys(chromedp.CSS(`#token`), secret))
		submit("sign in", `form[action="/ui/signin"]`)
		run("signed in", chromedp.WaitVisible(chromedp.CSS(`form.signout`)))
	}

	// An unauthenticated page lands on the sign-in form.
	run("open", chromedp.Navigate(e.base+"/ui/orgs"), chromedp.WaitVisible(chromedp.CSS(`#token`)))
	shot("signin")
	signIn(adminSecret)
	expect("h1", "Organisations")

	run("create acme", chromedp.SendKeys(chromedp.CSS(`#org`), "acme"))
	submit("create acme", `form[action="/ui/orgs"]`)
	expect("h1", "Organisation acme")
	run("create other", chromedp.Navigate(e.base+"/ui/orgs"), chromedp.WaitVisible(chromedp.CSS(`#org`)),
		chromedp.SendKeys(chromedp.CSS(`#org`), "other"))
	submit("create other", `form[action="/ui/orgs"]`)
	expect("h1", "Organisation other")
	run("orgs list", chromedp.Navigate(e.base+"/ui/orgs"), chromedp.WaitVisible(chromedp.CSS(`table`)))
	expect("table", "acme")
	shot("organisations")

	run("acme", chromedp.Navigate(e.base+"/ui/orgs/acme"), chromedp.WaitVisible(chromedp.CSS(`#add`)),
		chromedp.SendKeys(chromedp.CSS(`#add`), "10.0.0.0/8"))
	submit("add prefix", `form[action="/ui/orgs/acme/prefixes"]`)
	expect(".prefixes", "10.0.0.0/8")
	shot("organisation")

	run("overrides", chromedp.Navigate(e.base+"/ui/orgs/acme/overrides"), chromedp.WaitVisible(chromedp.CSS(`#cidr`)),
		chromedp.SendKeys(chromedp.CSS(`#cidr`), "10.0.0.0/24"), chromedp.SendKeys(chromedp.CSS(`#username`), "alice"))
	submit("add override", `form[action="/ui/orgs/acme/overrides"]`)
	expect("table", "alice")
	expect("table", "active")
	shot("overrides")
	// Bad input: the form again, the message by the field.
	run("bad override", chromedp.SendKeys(chromedp.CSS(`#cidr`), "10.0.0.1/24"))
	submit("bad override", `form[action="/ui/orgs/acme/overrides"]`)
	expect("#cidr-error", "host bits set")
	shot("override-refused")

	run("settings", chromedp.Navigate(e.base+"/ui/orgs/acme/settings"), chromedp.WaitVisible(chromedp.CSS(`#document`)),
		chromedp.SetValue(chromedp.CSS(`#scope`), "username"), chromedp.SendKeys(chromedp.CSS(`#value`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`#document`), `{"blocked_categories": [3]}`))
	submit("save settings", `form[action="/ui/orgs/acme/settings"]`)
	expect("table", "username:alice")
	shot("settings")

	run("effective", chromedp.Navigate(e.base+"/ui/orgs/acme/effective"), chromedp.WaitVisible(chromedp.CSS(`#username`)),
		chromedp.SendKeys(chromedp.CSS(`#username`), "alice"))
	submit("effective", `form[action="/ui/orgs/acme/effective"]`)
	expect("#effective", "username:alice")
	expect("#effective", "[3]")
	shot("effective")

	run("why", chromedp.Navigate(e.base+"/ui/orgs/acme/why"), chromedp.WaitVisible(chromedp.CSS(`#domain`)),
		chromedp.SendKeys(chromedp.CSS(`#domain`), "www.example.com"), chromedp.SendKeys(chromedp.CSS(`#ip`), "10.0.0.1"))
	submit("why", `form[action="/ui/orgs/acme/why"]`)
	expect("#verdict", "allow")
	expect(".trace", "identity")
	shot("why")

	// Activity: the blocks of the last day, the charts, a filter, and a
	// row's "why" link.
	run("activity", chromedp.Navigate(e.base+"/ui/orgs/acme/activity"), chromedp.WaitVisible(chromedp.CSS(`#events`)))
	expect("#events", "ads.example.com.")
	expect("#events", "category 3 <blocked>")
	run("charts", chromedp.WaitVisible(chromedp.CSS(`#chart-category svg rect`)), chromedp.WaitVisible(chromedp.CSS(`#chart-subscriber svg`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-reason svg`)))
	expect("#chart-subscriber", "alice: 38") // her block and her 37 plain allows
	shot("activity")
	run("filter", chromedp.SendKeys(chromedp.CSS(`#ip`), "not-an-ip"))
	submit("filter", `#filters`)
	expect("#ip-error", "want an address")
	run("filter again", chromedp.Navigate(e.base+"/ui/orgs/acme/activity"), chromedp.WaitVisible(chromedp.CSS(`#events`)),
		chromedp.SendKeys(chromedp.CSS(`#qname`), "example.net"))
	submit("filter by name", `#filters`)
	// The form's answer is the store's, filtered by the name (and the
	// names under it) and the verdict the form kept.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		url, _ := chromedp.Run(ctx, chromedp.Location())
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(`#events`)))
		if strings.Contains(url, "qname=example.net") && strings.Contains(html, "tracker.example.net.") &&
			!strings.Contains(html, "ads.example.com.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("filtered by example.net, %s shows %s", url, html)
		}
	}
	run("why link", chromedp.Navigate(e.base+"/ui/orgs/acme/activity"), chromedp.WaitVisible(chromedp.CSS(`#events a.why`)),
		chromedp.Click(`#events a.why`))
	expect("h1", "Why")
	expect("#verdict", "allow")
	run("why prefilled", chromedp.WaitVisible(chromedp.CSS(`#domain`)))
	if got, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(`#domain`))); err != nil || got != "ads.example.com" {
		t.Fatalf("why page's domain %q (%v)", got, err)
	}

	run("nodes", chromedp.Navigate(e.base+"/ui/nodes"), chromedp.WaitVisible(chromedp.CSS(`h1`)))
	expect("#nodes", "dns1-resolver")
	expect("#nodes", "ready")
	shot("nodes")

	// A form without its CSRF token is refused and changes nothing.
	run("csrf-less", chromedp.Navigate(e.base+"/ui/orgs"), chromedp.WaitVisible(chromedp.CSS(`#org`)),
		void(chromedp.Evaluate[any](`document.querySelector('form[action="/ui/orgs"] input[name=csrf]').remove()`)),
		chromedp.SendKeys(chromedp.CSS(`#org`), "forged"))
	submit("csrf-less post", `form[action="/ui/orgs"]`)
	expect("h1", "Form expired")
	if _, err := e.store.GetOrg(context.Background(), "forged"); err == nil {
		t.Fatal("a CSRF-less form wrote")
	}

	run("sign out", chromedp.Navigate(e.base+"/ui/orgs"), chromedp.WaitVisible(chromedp.CSS(`form.signout`)))
	submit("sign out", `form.signout`)
	run("signed out", chromedp.WaitVisible(chromedp.CSS(`#token`)))
	run("gone", chromedp.Navigate(e.base+"/ui/orgs/acme"), chromedp.WaitVisible(chromedp.CSS(`#token`)))

	// A scoped token: its organisation, and 403 for another.
	signIn(acmeSecret)
	expect("main", "This token reaches one organisation: acme")
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(e.base+"/ui/orgs/other"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 403 {
		t.Fatalf("another organisation answered %d, want 403", resp.Status)
	}
	expect("#page-error", "this token may not do that")
	shot("forbidden")

	// Narrow screens: the overrides page at 390 px.
	if shots != "" {
		run("narrow", chromedp.EmulateViewport(390, 844), chromedp.Navigate(e.base+"/ui/orgs/acme/overrides"),
			chromedp.WaitVisible(chromedp.CSS(`#cidr`)))
		shot("overrides-390px")
	}
}

// void runs an action and drops its value.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}
