package app

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// omRun is an orgmanager started for a test, on cfg, with its log kept.
type omRun struct {
	t    *testing.T
	om   *OrgManager
	base string
	log  *syncBuffer
}

// startOM starts an orgmanager on dbURL with nc (nil: no NATS); tune
// adjusts the configuration and the OrgManager before Run.
func startOM(t *testing.T, dbURL string, nc *nats.Conn, tune func(*OrgManagerConfig), probe time.Duration) *omRun {
	t.Helper()
	cfg := DefaultOrgManagerConfig()
	withTestToken(t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Database.URL = dbURL
	cfg.Deploy.RetryMin, cfg.Deploy.RetryMax = 10*time.Millisecond, 50*time.Millisecond
	cfg.Deploy.PublishTimeout = time.Second
	if tune != nil {
		tune(&cfg)
	}
	buf := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	om, err := StartOrgManager(ctx, cfg, nc, "test", log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if probe > 0 {
		om.writeProbeInterval = probe
	}
	done := make(chan error, 1)
	go func() { done <- om.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return &omRun{t: t, om: om, base: "http://" + om.Addr().String(), log: buf}
}

func (r *omRun) call(method, path, body string, want int) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		r.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, got, want)
	}
}

// health returns /health's status and error text.
func (r *omRun) health() (int, string) {
	r.t.Helper()
	resp, err := http.Get(r.base + "/health")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		r.t.Fatal(err)
	}
	if (resp.StatusCode == 200) != (body.Status == "ok") {
		r.t.Fatalf("/health %d with status %q", resp.StatusCode, body.Status)
	}
	return resp.StatusCode, body.Error
}

// waitHealth waits until /health is 200 (want "") or 503 with an error
// containing want.
func (r *omRun) waitHealth(want string) {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, msg := r.health()
		if want == "" && code == 200 || want != "" && code == 503 && strings.Contains(msg, want) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("/health = %d %q; want %q", code, msg, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sideDB opens the orgmanager's database beside it, as an operator (or a
// fault) would.
func sideDB(t *testing.T, dialect, url string) *sql.DB {
	t.Helper()
	driver, dsn := "pgx", url
	if dialect == storetest.SQLite {
		driver, dsn = "sqlite", strings.TrimPrefix(url, "sqlite:")+"?_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestOrgManagerHealthStoreNotWritable: a write the database refuses turns
// /health 503 "database not writable" until a write succeeds again. The
// fault is a trigger that fails every change of an organisation.
func TestOrgManagerHealthStoreNotWritable(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		url := storetest.URL(t, dialect)
		r := startOM(t, url, nil, nil, time.Hour)
		r.call("PUT", "/org/acme", "", 200)
		r.waitHealth("")

		db := sideDB(t, dialect, url)
		fault := map[string][2]string{ // break, repair
			storetest.SQLite: {`CREATE TRIGGER fault BEFORE UPDATE ON orgs BEGIN SELECT RAISE(ABORT, 'disk on fire'); END`,
				`DROP TRIGGER fault`},
			storetest.Postgres: {`CREATE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$;
				CREATE TRIGGER fault BEFORE UPDATE ON orgs FOR EACH ROW EXECUTE FUNCTION fault()`,
				`DROP TRIGGER fault ON orgs; DROP FUNCTION fault()`},
		}[dialect]
		if _, err := db.Exec(fault[0]); err != nil {
			t.Fatal(err)
		}
		r.call("PUT", "/org/acme", "", 500)
		code, msg := r.health()
		if code != 503 || !strings.Contains(msg, "database not writable") || !strings.Contains(msg, "disk on fire") {
			t.Fatalf("/health after a failed write = %d %q", code, msg)
		}
		if _, err := db.Exec(fault[1]); err != nil {
			t.Fatal(err)
		}
		r.call("PUT", "/org/acme", "", 200)
		r.waitHealth("")
	})
}

// TestOrgManagerHealthWriteProbe: with nobody writing, the periodic write
// probe finds a database that does not take writes, and finds it repaired.
// The fault: a table where the probe creates its own (SQLite only: the
// PostgreSQL probe uses a temporary table, which nothing outside its
// session can block).
func TestOrgManagerHealthWriteProbe(t *testing.T) {
	url := storetest.URL(t, storetest.SQLite)
	r := startOM(t, url, nil, nil, 20*time.Millisecond)
	r.waitHealth("")
	db := sideDB(t, storetest.SQLite, url)
	if _, err := db.Exec(`CREATE TABLE orgstore_write_probe (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	r.waitHealth("database not writable")
	if _, err := db.Exec(`DROP TABLE orgstore_write_probe`); err != nil {
		t.Fatal(err)
	}
	r.waitHealth("")
	// Logged just after the probe's outcome is recorded.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.log.String(), "database takes writes again") {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery in the log:\n%s", r.log)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOrgManagerNATSUnreachableAtStart: NATS down when the orgmanager
// starts. Writes still succeed; /health and the deploy's log say "IP Mapper
// unreachable" — not what the NATS client reports then ("outbound buffer
// limit exceeded", "session is N bytes, more than one NATS message can
// carry", issue 11).
func TestOrgManagerNATSUnreachableAtStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	nc := connectNATS(t, "nats://"+addr, t.Name(), natstest.Logger(t), true)
	r := startOM(t, storetest.URL(t, storetest.SQLite), nc, nil, 0)
	r.call("PUT", "/org/acme", "", 200)
	// A session to publish: with no connection yet the client knew no
	// maximum payload, and every session was "too big".
	r.call("PATCH", "/org/acme/prefixes", `{"add":["10.0.0.0/8"]}`, 200)
	r.waitHealth("IP Mapper unreachable: not connected to NATS")
	deadline := time.Now().Add(15 * time.Second)
	// The organisation's deploy (the global settings slot fails too, as
	// "NATS unreachable").
	for !strings.Contains(r.log.String(), `msg="deploy failed; retrying" service=orgmanager org=acme`) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed deploy logged:\n%s", r.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	logs := r.log.String()
	for _, bad := range []string{"outbound buffer", "more than one NATS message"} {
		if strings.Contains(logs, bad) {
			t.Errorf("log says %q:\n%s", bad, logs)
		}
	}
	if !strings.Contains(logs, "IP Mapper unreachable") {
		t.Errorf("log does not say the IP Mapper is unreachable:\n%s", logs)
	}
}

// fakeMapper answers the IP Mapper's get-sessions (what the health ping
// asks) with no session and clean-sessions with nothing removed, and
// refuses set-session-batch with a 500 as an IP Mapper whose bucket fails
// does.
func fakeMapper(t *testing.T, nc *nats.Conn) func() {
	t.Helper()
	var subs []*nats.Subscription
	for subj, reply := range map[string]string{wire.SubjectGetSessions: `{"sessions":[]}`, wire.SubjectCleanSessions: `{"removed":0}`} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte(reply)) })
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	sub, err := nc.Subscribe(wire.SubjectSetSessionBatch, func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(micro.ErrorCodeHeader, "500")
		reply.Header.Set(micro.ErrorHeader, "sessions bucket: insufficient storage")
		reply.Data = []byte(`{"error":"sessions bucket: insufficient storage"}`)
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	subs = append(subs, sub)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
		_ = nc.Flush()
	}
}

// TestOrgManagerHealthIPMapper: on a NATS where no IP Mapper answers,
// /health says so (the ping, with nothing to deploy); once one answers it
// is 200; when that IP Mapper refuses every deploy, /health turns 503 once
// the oldest undeployed change is older than deploy.max_dirty_age, with the
// last deploy error.
func TestOrgManagerHealthIPMapper(t *testing.T) {
	bus := natstest.Start(t)
	nc := connectNATS(t, bus.Srv.ClientURL(), "orgmanager", natstest.Logger(t), false)
	r := startOM(t, storetest.URL(t, storetest.SQLite), nc, func(c *OrgManagerConfig) {
		c.Deploy.MaxDirtyAge = 300 * time.Millisecond
	}, 0)
	r.waitHealth("IP Mapper unreachable")
	stop := fakeMapper(t, bus.NC)
	// The ping runs every 10 s; a write makes a publish answer sooner.
	r.call("PUT", "/org/acme", "", 200)
	r.call("PATCH", "/org/acme/prefixes", `{"add":["10.0.0.0/8"]}`, 200)
	// Once the age passes the bound, /health is 503 at once; the deploy
	// error joins the text when the first publish has failed, which under
	// load may come a moment later.
	r.waitHealth("insufficient storage")
	code, msg := r.health()
	if code != 503 || !strings.Contains(msg, "deploys are behind") || !strings.Contains(msg, "deploy.max_dirty_age is 300ms") {
		t.Fatalf("/health = %d %q", code, msg)
	}
	stop()
	r.waitHealth("IP Mapper unreachable")
}
