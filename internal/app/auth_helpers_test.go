package app

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// testAdminToken is the admin token of every orgmanager and `svc-pf all`
// these tests start (AuthConfig.AdminToken, as SVCPF_ADMIN_TOKEN would set
// it), and of the standalone IP Mappers' verifiers (testMapperAuth).
var testAdminToken = access.GenerateToken()

// bearerTransport gives every request of the package's tests that has no
// Authorization header the admin token: the tests of what the services do
// call the APIs as a platform admin would. The tests of access itself
// (auth_test.go) use clients of their own.
type bearerTransport struct{ base http.RoundTripper }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+testAdminToken)
	}
	return b.base.RoundTrip(r)
}

// withTestToken makes an orgmanager config start with testAdminToken, and
// keeps a bootstrap file out of the working directory.
func withTestToken(t testing.TB, cfg *OrgManagerConfig) {
	cfg.Auth.AdminToken = testAdminToken
	cfg.Auth.BootstrapTokenFile = filepath.Join(t.TempDir(), "admin.token")
}

// testMapperAuth gives a standalone IP Mapper config a verifier of its own
// on a fresh SQLite database that holds testAdminToken.
func testMapperAuth(t testing.TB, cfg *IPMapperConfig) {
	t.Helper()
	store := storetest.Open(t, storetest.SQLite)
	tokens, err := access.New(access.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Ensure(context.Background(), testAdminToken, "test"); err != nil {
		t.Fatal(err)
	}
	cfg.Auth.Verifier = tokens
}
