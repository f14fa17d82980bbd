package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/app"
	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

const tokenUsage = `Usage:
  svc-pf token create --role admin|org-admin|org-viewer [--org ORG] [--name NAME] [--expires DURATION]
  svc-pf token list
  svc-pf token revoke ID
  svc-pf token generate
Options of create, list and revoke:
  -c, --config FILE   the orgmanager's config (default /etc/svc-pf/orgmanager.yaml), for database.url
  --database URL      the database instead (sqlite:PATH or postgres://…; under svc-pf all
                      sqlite:<data_dir>/orgmanager.db)

Works on the orgmanager's database directly, as a platform admin: for the first tokens,
and when no token is at hand. create prints the token on stdout, once; only its hash is
kept. --org names the organisation of a scoped role; --expires is a Go duration (720h).
A revocation applies in every running orgmanager within seconds (docs/access.md).

generate prints a fresh token string and stores nothing: a value for SVCPF_ADMIN_TOKEN,
which every start then ensures exists as an admin token (a secrets manager keeps it).
`

// runToken is `svc-pf token …`.
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stderr
		if len(args) > 0 {
			w = stdout
		}
		fmt.Fprint(w, tokenUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, rest := args[0], args[1:]
	if sub == "generate" {
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "svc-pf token generate takes no arguments\n\n%s", tokenUsage)
			return 2
		}
		fmt.Fprintln(stdout, access.GenerateToken())
		return 0
	}
	fs := flag.NewFlagSet("svc-pf token "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tokenUsage) }
	const defaultPath = "/etc/svc-pf/orgmanager.yaml"
	var configPath string
	fs.StringVar(&configPath, "config", defaultPath, "the orgmanager's config file")
	fs.StringVar(&configPath, "c", defaultPath, "shorthand for --config")
	dbURL := fs.String("database", "", "the database URL instead of the config's database.url")
	var role, org, name *string
	var expires *time.Duration
	switch sub {
	case "create":
		role = fs.String("role", "", "admin, org-admin or org-viewer")
		org = fs.String("org", "", "the organisation of a scoped role")
		name = fs.String("name", "", "a label for people reading lists and audit records")
		expires = fs.Duration("expires", 0, "lifetime as a Go duration (0: never expires)")
	case "list", "revoke":
	default:
		fmt.Fprintf(stderr, "svc-pf token: unknown subcommand %q\n\n%s", sub, tokenUsage)
		return 2
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var id string
	switch {
	case sub == "revoke" && fs.NArg() == 1:
		id = fs.Arg(0)
	case sub == "revoke":
		fmt.Fprintf(stderr, "svc-pf token revoke: give one token id\n\n%s", tokenUsage)
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "svc-pf token %s: unexpected arguments %q\n", sub, fs.Args())
		return 2
	}
	if sub == "create" && *role == "" {
		fmt.Fprintf(stderr, "svc-pf token create: --role is required\n\n%s", tokenUsage)
		return 2
	}
	url := *dbURL
	if url == "" {
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" || f.Name == "c" })
		cfg := app.DefaultOrgManagerConfig()
		if err := config.Load(configPath, explicit, &cfg); err != nil {
			fmt.Fprintf(stderr, "svc-pf token %s: %v\n", sub, err)
			return 1
		}
		url = cfg.Database.URL
	}
	store, err := orgstore.Open(ctx, orgstore.Config{URL: url, MaxReadConns: 1, Guest: true})
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf token %s: %v\n", sub, err)
		return 1
	}
	defer store.Close()
	tokens, err := access.New(access.Config{Store: store})
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf token %s: %v\n", sub, err)
		return 1
	}
	cli := access.Principal{Role: access.RoleAdmin, Name: "svc-pf token"}
	switch sub {
	case "create":
		t, secret, err := tokens.Create(ctx, cli, access.NewToken{Role: access.Role(*role), Org: *org, Name: *name, Expires: *expires})
		if err != nil {
			fmt.Fprintf(stderr, "svc-pf token create: %v\n", err)
			if errors.Is(err, access.ErrInvalid) {
				return 2
			}
			return 1
		}
		fmt.Fprintln(stdout, secret)
		fmt.Fprintf(stderr, "created token %s (%s%s); it is shown only this once\n", t.ID, t.Role, orgSuffix(t.Org))
	case "list":
		list, err := tokens.List(ctx, cli)
		if err != nil {
			fmt.Fprintf(stderr, "svc-pf token list: %v\n", err)
			return 1
		}
		printTokens(stdout, list)
	case "revoke":
		if err := tokens.Revoke(ctx, cli, id); err != nil {
			fmt.Fprintf(stderr, "svc-pf token revoke: %s: %v\n", id, err)
			return 1
		}
		fmt.Fprintf(stdout, "revoked %s\n", id)
	}
	return 0
}

func orgSuffix(org string) string {
	if org == "" {
		return ""
	}
	return " of " + org
}

func printTokens(w io.Writer, list []access.Token) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no tokens")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tORG\tNAME\tCREATED\tEXPIRES\tREVOKED")
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, t := range list {
		org, name := t.Org, t.Name
		if org == "" {
			org = "-"
		}
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Role, org, name, when(t.CreatedAt), when(t.ExpiresAt), when(t.RevokedAt))
	}
	_ = tw.Flush()
}
