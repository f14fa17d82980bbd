package feeds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// source reads the files of one feed directory.
type source interface {
	// fetch reads file, refusing one over limit bytes (errTooLarge). With
	// non-zero cond it asks for the file only if it changed, and reports
	// notModified when it did not. A file that does not exist is an error
	// wrapping fs.ErrNotExist.
	fetch(ctx context.Context, file string, limit int64, cond validators) (data []byte, val validators, notModified bool, err error)
}

// validators are an HTTP response's cache validators, sent back on the next
// request for the same file so an unchanged file costs a 304.
type validators struct {
	etag, lastModified string
}

func (v validators) isZero() bool { return v == validators{} }

// errTooLarge marks a file over its Limits cap.
var errTooLarge = errors.New("over the size limit")

// newSource parses a FeedConfig.URL.
func newSource(raw string, client *http.Client) (source, error) {
	if raw == "" {
		return nil, errors.New("required: an http(s):// URL of the feed directory, or a local directory path")
	}
	if !strings.Contains(raw, "://") {
		dir, err := filepath.Abs(raw)
		if err != nil {
			return nil, fmt.Errorf("local path %q: %w", raw, err)
		}
		return &dirSource{dir: dir}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("%q: a file URL names no host (file:///dir)", raw)
		}
		if u.Path == "" {
			return nil, fmt.Errorf("%q: a file URL needs a path (file:///dir)", raw)
		}
		return &dirSource{dir: filepath.Clean(u.Path)}, nil
	case "http", "https":
	default:
		return nil, fmt.Errorf("%q: scheme %q is not supported; use http, https, file or a local path", raw, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q names no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return nil, fmt.Errorf("%q: a feed URL is a directory; remove the query or fragment", raw)
	}
	// The manifest names files relative to the directory; without the
	// slash, resolving them would replace the directory's last segment.
	if !strings.HasSuffix(u.EscapedPath(), "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	// Remove dot segments now, as resolving a file name would, so the
	// base is the directory the files are fetched from.
	u = u.ResolveReference(&url.URL{})
	return &httpSource{base: u, client: client}, nil
}

// httpSource is a feed directory served over HTTP.
type httpSource struct {
	base   *url.URL
	client *http.Client
}

func (s *httpSource) fetch(ctx context.Context, file string, limit int64, cond validators) ([]byte, validators, bool, error) {
	u := s.base.ResolveReference(&url.URL{Path: file})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, validators{}, false, err
	}
	req.Header.Set("User-Agent", "svc-pf-feed-client")
	if cond.etag != "" {
		req.Header.Set("If-None-Match", cond.etag)
	}
	if cond.lastModified != "" {
		req.Header.Set("If-Modified-Since", cond.lastModified)
	}
	if strings.HasSuffix(file, ".gz") {
		// The checksum is of the stored bytes: a server that compressed
		// them again on the fly must not have them unpacked here.
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, validators{}, false, err
	}
	defer func() {
		// A little draining lets the connection be reused for the next poll.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		_ = resp.Body.Close()
	}()
	where := u.Redacted()
	switch {
	case resp.StatusCode == http.StatusNotModified && !cond.isZero():
		return nil, cond, true, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return nil, validators{}, false, fmt.Errorf("GET %s: %s: %w", where, resp.Status, fs.ErrNotExist)
	case resp.StatusCode != http.StatusOK:
		return nil, validators{}, false, fmt.Errorf("GET %s: %s", where, resp.Status)
	}
	if resp.ContentLength > limit {
		return nil, validators{}, false, fmt.Errorf("GET %s: %d bytes: %w of %d", where, resp.ContentLength, errTooLarge, limit)
	}
	data, err := readLimited(resp.Body, resp.ContentLength, limit)
	if err != nil {
		return nil, validators{}, false, fmt.Errorf("GET %s: %w", where, err)
	}
	return data, validators{etag: resp.Header.Get("ETag"), lastModified: strongLastModified(resp.Header)}, false, nil
}

// strongLastModified returns the response's Last-Modified if it can stand
// for the content, else "". HTTP dates have one-second resolution: a
// manifest replaced within the second it was served would keep its date,
// and a conditional request would then miss the new one until the next
// publish. So, as RFC 9110 §8.8.2.2 says, a date is only trusted when it is
// comfortably older than the response's Date.
func strongLastModified(h http.Header) string {
	lm := h.Get("Last-Modified")
	if lm == "" {
		return ""
	}
	mod, err1 := http.ParseTime(lm)
	date, err2 := http.ParseTime(h.Get("Date"))
	if err1 != nil || err2 != nil || date.Sub(mod) < 2*time.Second {
		return ""
	}
	return lm
}

// dirSource is a feed directory on a local file system. It has no
// validators: the caller compares a re-read manifest with the last one,
// which for a small file costs less than stat-based guesses would save.
type dirSource struct {
	dir string
}

func (s *dirSource) fetch(_ context.Context, file string, limit int64, _ validators) ([]byte, validators, bool, error) {
	f, err := os.Open(filepath.Join(s.dir, file))
	if err != nil {
		return nil, validators{}, false, err // an *fs.PathError naming the file; wraps fs.ErrNotExist when absent
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, validators{}, false, err
	}
	if !st.Mode().IsRegular() {
		// A FIFO or device could block or never end.
		return nil, validators{}, false, fmt.Errorf("%s is not a regular file", f.Name())
	}
	if st.Size() > limit {
		return nil, validators{}, false, fmt.Errorf("%s: %d bytes: %w of %d", f.Name(), st.Size(), errTooLarge, limit)
	}
	data, err := readLimited(f, st.Size(), limit)
	if err != nil {
		return nil, validators{}, false, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return data, validators{}, false, nil
}

// readLimited reads r to its end, refusing more than limit bytes. size (or
// -1) sizes the buffer once, so a large snapshot is not copied as it grows.
func readLimited(r io.Reader, size, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if size > 0 && size <= limit {
		buf.Grow(int(size) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("more than %d bytes: %w", limit, errTooLarge)
	}
	return buf.Bytes(), nil
}
