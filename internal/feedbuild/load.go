package feedbuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// LoadConfig says where a feed is: a directory or an http(s) URL of one.
type LoadConfig struct {
	Dir    string
	URL    string
	Client *http.Client // for URL; nil is http.DefaultClient
	// MaxFileSize bounds one downloaded file; 0 is 1 GiB.
	MaxFileSize int64
}

// Feed is a feed read in full: its manifest, its titles (nil when the feed
// has no feed-codes.json) and the content of its latest version.
type Feed struct {
	Manifest *feed.Manifest
	Codes    *feed.Codes
	Content  Content
	// ContentSHA256 is Content's checksum (feed.ContentSHA256), which Load
	// checks against the manifest's latest entry when it names one.
	ContentSHA256 string
}

// Title is the title feed-codes.json gives code, or "".
func (f *Feed) Title(code uint16) string {
	if f.Codes != nil {
		for _, c := range f.Codes.Codes {
			if c.Code == code {
				return c.Title
			}
		}
	}
	return ""
}

// Load reads a feed as a node does: feed.json, then the snapshot and the
// deltas it names, each checked against its SHA-256 and applied in order.
// A missing feed.json is an error wrapping fs.ErrNotExist.
func Load(ctx context.Context, cfg LoadConfig) (*Feed, error) {
	get, err := newGetter(cfg)
	if err != nil {
		return nil, err
	}
	data, err := get(ctx, feed.ManifestFile)
	if err != nil {
		return nil, err
	}
	m, err := feed.DecodeManifest(data)
	if err != nil {
		return nil, err
	}
	f := &Feed{Manifest: m, Content: Content{}}
	if err := f.apply(ctx, get, m.Versions); err != nil {
		return nil, err
	}
	f.ContentSHA256 = feed.ContentSHA256(f.Content.snapshotLines())
	if want := m.Versions[len(m.Versions)-1].ContentSHA256; want != "" && want != f.ContentSHA256 {
		return nil, fmt.Errorf("version %d: the snapshot and deltas give content_sha256 %s, but the manifest says %s: a file was replaced or the manifest is wrong",
			m.Latest(), f.ContentSHA256, want)
	}
	switch data, err := get(ctx, feed.CodesFile); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if f.Codes, err = feed.DecodeCodes(data); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// apply downloads, checks and applies versions in order.
func (f *Feed) apply(ctx context.Context, get getter, versions []feed.Version) error {
	for _, v := range versions {
		data, err := get(ctx, v.File)
		if err != nil {
			return fmt.Errorf("version %d: %w", v.Version, err)
		}
		if v.Type == feed.TypeSnapshot {
			f.Content = make(Content, v.Entries)
		}
		if err := decodeFile(data, v, f.Content.apply); err != nil {
			return fmt.Errorf("version %d: %w", v.Version, err)
		}
		if v.Type == feed.TypeSnapshot && len(f.Content) != v.Entries {
			return fmt.Errorf("version %d: %s repeats keys (%d distinct of %d lines)", v.Version, v.File, len(f.Content), v.Entries)
		}
	}
	return nil
}

// getter returns the bytes of one file of the feed.
type getter func(ctx context.Context, name string) ([]byte, error)

func newGetter(cfg LoadConfig) (getter, error) {
	maxSize := cfg.MaxFileSize
	if maxSize <= 0 {
		maxSize = 1 << 30
	}
	switch {
	case (cfg.Dir == "") == (cfg.URL == ""):
		return nil, errors.New("give the feed as a directory or as a URL, one of them")
	case cfg.Dir != "":
		dir := cfg.Dir
		return func(_ context.Context, name string) ([]byte, error) {
			// os.Root keeps every read inside the directory, even through
			// a symbolic link a manifest's file name might be.
			root, err := os.OpenRoot(dir)
			if err != nil {
				return nil, err
			}
			defer root.Close()
			return root.ReadFile(name)
		}, nil
	}
	base, err := url.Parse(cfg.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("feed URL %q: want http(s)://host/path/ of a feed directory", cfg.URL)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/" // the URL names the directory, files are inside it
	}
	client := cfg.Client
	if client == nil {
		client = http.DefaultClient
	}
	return func(ctx context.Context, name string) ([]byte, error) {
		u := base.ResolveReference(&url.URL{Path: name})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return nil, fmt.Errorf("GET %s: %s: %w", u, resp.Status, fs.ErrNotExist)
		case resp.StatusCode != http.StatusOK:
			return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxSize+1))
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		if int64(len(data)) > maxSize {
			return nil, fmt.Errorf("GET %s: larger than %d bytes", u, maxSize)
		}
		return data, nil
	}, nil
}
