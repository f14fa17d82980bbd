package feedbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultListen is `feed serve`'s address: loopback, so that a feed is
// published to the network only when the operator says so. The port
// follows the other services' (8080 orgmanager … 8084 activity, 8085 feed
// update, 8086 radius), so that it runs beside them on a control-plane
// machine with every default.
const DefaultListen = "127.0.0.1:8087"

// ServerConfig is one `feed serve`.
type ServerConfig struct {
	// Dirs are served as /<base name of DIR>/<file> when DIR is a feed
	// directory, and as /<sub>/<file> for each feed directory <sub> inside
	// DIR otherwise; the first DIR that has the feed serves it. Each must
	// exist (the command line's --dir).
	Dirs []string
	// Feeds and Parents are the config file's: each feed directory served
	// under its own name, and directories of feed directories. A named
	// feed wins over a parent's sub-directory of the same name. A
	// directory that does not exist yet (a feed update that has not built
	// it) is logged and answers 404 until it appears.
	Feeds   []ServedFeed
	Parents []string
	Listen  string       // "" is DefaultListen
	Log     *slog.Logger // nil discards
	// ShutdownTimeout bounds the wait for requests in flight when the
	// context ends; 0 is 10 s.
	ShutdownTimeout time.Duration
}

// ServedFeed is one feed directory and the name it is served under:
// /<Name>/feed.json and its files, the URL a node's feeds: entry names
// (http://HOST:PORT/<Name>/).
type ServedFeed struct {
	Name string `yaml:"name"`
	Dir  string `yaml:"dir"`
}

// ValidateServed checks a config file's feeds: and parents: without
// touching the disk (svc-pf check runs it anywhere): each error names its
// key.
func ValidateServed(list []ServedFeed, parents []string) error {
	var errs []error
	if len(list) == 0 && len(parents) == 0 {
		errs = append(errs, errors.New("feeds and parents: both empty: list the feed directories to serve"))
	}
	seen := map[string]int{}
	for i, f := range list {
		switch {
		case f.Name == "":
			errs = append(errs, fmt.Errorf("feeds[%d].name is required: the URL path /NAME/ the feed is served under", i))
		case !validFeedName(f.Name):
			errs = append(errs, fmt.Errorf("feeds[%d].name %q: want letters, digits, '.', '_' or '-', starting with a letter or digit (the URL path /NAME/)", i, f.Name))
		default:
			if j, dup := seen[f.Name]; dup {
				errs = append(errs, fmt.Errorf("feeds[%d].name %q: also feeds[%d]'s; a name serves one directory", i, f.Name, j))
			} else {
				seen[f.Name] = i
			}
		}
		if f.Dir == "" {
			errs = append(errs, fmt.Errorf("feeds[%d].dir is required: the feed directory (a feed update's dir)", i))
		}
	}
	for i, p := range parents {
		if p == "" {
			errs = append(errs, fmt.Errorf("parents[%d] is empty: want a directory holding feed directories", i))
		}
	}
	return errors.Join(errs...)
}

func validFeedName(name string) bool {
	return feedNameRE.MatchString(name) && !strings.Contains(name, "..")
}

// Served is what a Server serves, resolved: the named feeds first, then
// the parents, in order. A Server swaps it whole (SetServed), so that a
// request sees the old set or the new one, never a mix.
type Served struct {
	feeds   []servedDir // name → absolute directory
	parents []string    // absolute
	missing []string    // directories absent when resolved
}

type servedDir struct{ name, dir string }

// String lists the served directories as the log shows them.
func (v *Served) String() string {
	var parts []string
	for _, f := range v.feeds {
		parts = append(parts, "/"+f.name+"/="+f.dir)
	}
	for _, p := range v.parents {
		parts = append(parts, "/*/="+p+"/*")
	}
	return strings.Join(parts, ",")
}

// Missing are the directories that did not exist when v was resolved.
func (v *Served) Missing() []string { return v.missing }

// ResolveServed checks feeds: and parents: (ValidateServed) and resolves
// them to absolute directories. A directory that does not exist is not an
// error (Missing names it): the feed update that writes it may not have
// run yet. A path that exists and is not a directory, or cannot be
// looked at, is an error naming its key.
func ResolveServed(list []ServedFeed, parents []string) (*Served, error) {
	if err := ValidateServed(list, parents); err != nil {
		return nil, err
	}
	v := &Served{}
	var errs []error
	check := func(key, dir string) string {
		abs, err := filepath.Abs(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", key, dir, err))
			return ""
		}
		fi, err := os.Stat(abs)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			v.missing = append(v.missing, abs)
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %s: %w", key, dir, err))
		case !fi.IsDir():
			errs = append(errs, fmt.Errorf("%s %s is not a directory", key, dir))
		}
		return abs
	}
	for i, f := range list {
		v.feeds = append(v.feeds, servedDir{name: f.Name, dir: check(fmt.Sprintf("feeds[%d].dir", i), f.Dir)})
	}
	for i, p := range parents {
		v.parents = append(v.parents, check(fmt.Sprintf("parents[%d]", i), p))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return v, nil
}

// Server serves feed directories as static files: only the files of a feed
// (feed.json, feed-codes.json, snapshot_N.gz, delta_N.gz), no listings,
// nothing outside the directories, ETag = the file's SHA-256.
type Server struct {
	served  atomic.Pointer[Served]
	listen  string
	log     *slog.Logger
	timeout time.Duration

	mu   sync.Mutex
	etag map[string]etagEntry // path → hash of the file as it was
}

type etagEntry struct {
	size  int64
	mtime time.Time
	ino   uint64
	tag   string
}

// maxETags bounds the ETag cache; old feeds' files drop out when it fills.
const maxETags = 4096

var (
	feedNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	feedFileRE = regexp.MustCompile(`^(feed\.json|feed-codes\.json|(snapshot|delta)_[0-9]+\.gz)$`)
)

// NewServer checks the configuration: every --dir must exist; the config
// file's directories as ResolveServed says.
func NewServer(cfg ServerConfig) (*Server, error) {
	if len(cfg.Dirs) > 0 && (len(cfg.Feeds) > 0 || len(cfg.Parents) > 0) {
		return nil, errors.New("give the directories as --dir or as feeds:/parents:, not both")
	}
	if len(cfg.Dirs) == 0 && len(cfg.Feeds) == 0 && len(cfg.Parents) == 0 {
		return nil, errors.New("no directory to serve: give --dir DIR (a feed directory, or one holding feed directories)")
	}
	s := &Server{listen: cfg.Listen, log: cfg.Log, timeout: cfg.ShutdownTimeout, etag: map[string]etagEntry{}}
	if s.listen == "" {
		s.listen = DefaultListen
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.timeout <= 0 {
		s.timeout = 10 * time.Second
	}
	if len(cfg.Dirs) == 0 {
		v, err := ResolveServed(cfg.Feeds, cfg.Parents)
		if err != nil {
			return nil, err
		}
		s.SetServed(v)
		return s, nil
	}
	// A --dir is both a feed under its base name and a parent: the
	// command line does not say which it is.
	v := &Served{}
	for _, d := range cfg.Dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("--dir %s: %w", d, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("--dir %s is not a directory", d)
		}
		v.feeds = append(v.feeds, servedDir{name: filepath.Base(abs), dir: abs})
		v.parents = append(v.parents, abs)
	}
	s.served.Store(v)
	return s, nil
}

// SetServed makes v what s serves, from the next request on; requests in
// flight finish on the files they opened. A missing directory is logged.
func (s *Server) SetServed(v *Served) {
	for _, d := range v.missing {
		s.log.Warn("feed serve: the directory does not exist (yet): its feeds answer 404 until it does", "dir", d)
	}
	s.served.Store(v)
}

// Run listens and serves until ctx ends, then stops gracefully: no new
// connections, requests in flight finish (up to the shutdown timeout).
// ready, if not nil, is called with the bound address before serving.
func (s *Server) Run(ctx context.Context, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.listen, err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	s.log.Info("feed serve listening", "address", ln.Addr().String(), "dirs", s.served.Load().String())
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	s.log.Info("feed serve stopped")
	return err
}

// ServeHTTP serves GET and HEAD of /<feed>/<file>.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// The raw path: a client's "%2e%2e" or "..%2f" must not become a path
	// element here either, so both segments are checked as sent.
	path := r.URL.EscapedPath()
	feedName, file, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok || !feedNameRE.MatchString(feedName) || strings.Contains(feedName, "..") || !feedFileRE.MatchString(file) {
		http.NotFound(w, r)
		return
	}
	root, dir := s.openFeed(feedName)
	if root == nil {
		http.NotFound(w, r)
		return
	}
	defer root.Close()
	f, err := root.Open(file)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("feed serve: open", "dir", dir, "file", file, "err", err)
		}
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	tag, err := s.etagOf(filepath.Join(dir, file), f, fi)
	if err != nil {
		s.log.Warn("feed serve: read", "dir", dir, "file", file, "err", err)
		http.Error(w, "cannot read the file", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("ETag", tag)
	// Every file is revalidated: feed.json changes under its name, and a
	// version file changes when a feed is rebuilt from scratch; with the
	// ETag a revalidation costs a 304.
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	if strings.HasSuffix(file, ".json") {
		h.Set("Content-Type", "application/json")
	} else {
		// The .gz file itself, not a gzip Content-Encoding: the client
		// checks the SHA-256 of the bytes as stored.
		h.Set("Content-Type", "application/gzip")
	}
	http.ServeContent(w, r, file, fi.ModTime(), f)
}

// openFeed opens the directory of feed name as an os.Root, through which
// no file name or symbolic link reaches outside it; nil when no directory
// served has the feed. A feed inside a parent is opened through the
// parent's Root, so a symbolic link there cannot lead outside the parent
// either.
func (s *Server) openFeed(name string) (*os.Root, string) {
	v := s.served.Load()
	for _, f := range v.feeds {
		if f.name == name {
			if r, err := os.OpenRoot(f.dir); err == nil {
				return r, f.dir
			}
		}
	}
	for _, d := range v.parents {
		parent, err := os.OpenRoot(d)
		if err != nil {
			continue
		}
		r, err := parent.OpenRoot(name)
		parent.Close()
		if err == nil {
			return r, filepath.Join(d, name)
		}
	}
	return nil, ""
}

// etagOf is the file's strong ETag, its SHA-256, computed once per version
// of the file (path, size, mtime, inode: a rename replaces the inode).
func (s *Server) etagOf(path string, f io.ReadSeeker, fi os.FileInfo) (string, error) {
	ino := fileID(fi)
	s.mu.Lock()
	e, ok := s.etag[path]
	s.mu.Unlock()
	if ok && e.size == fi.Size() && e.mtime.Equal(fi.ModTime()) && e.ino == ino {
		return e.tag, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tag := `"` + hex.EncodeToString(h.Sum(nil)) + `"`
	s.mu.Lock()
	if len(s.etag) >= maxETags {
		clear(s.etag)
	}
	s.etag[path] = etagEntry{size: fi.Size(), mtime: fi.ModTime(), ino: ino, tag: tag}
	s.mu.Unlock()
	return tag, nil
}
