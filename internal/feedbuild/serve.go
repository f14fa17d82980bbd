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
	"time"
)

// DefaultListen is `feed serve`'s address: loopback, so that a feed is
// published to the network only when the operator says so. The port
// follows the other services' (8080 orgmanager … 8083 ipmapper).
const DefaultListen = "127.0.0.1:8084"

// ServerConfig is one `feed serve`.
type ServerConfig struct {
	// Dirs are served as /<base name of DIR>/<file> when DIR is a feed
	// directory, and as /<sub>/<file> for each feed directory <sub> inside
	// DIR otherwise; the first DIR that has the feed serves it.
	Dirs   []string
	Listen string       // "" is DefaultListen
	Log    *slog.Logger // nil discards
	// ShutdownTimeout bounds the wait for requests in flight when the
	// context ends; 0 is 10 s.
	ShutdownTimeout time.Duration
}

// Server serves feed directories as static files: only the files of a feed
// (feed.json, feed-codes.json, snapshot_N.gz, delta_N.gz), no listings,
// nothing outside the directories, ETag = the file's SHA-256.
type Server struct {
	dirs    []string
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

// NewServer checks the configuration: every directory must exist.
func NewServer(cfg ServerConfig) (*Server, error) {
	if len(cfg.Dirs) == 0 {
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
		s.dirs = append(s.dirs, abs)
	}
	return s, nil
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
	s.log.Info("feed serve listening", "address", ln.Addr().String(), "dirs", strings.Join(s.dirs, ","))
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
// no file name or symbolic link reaches outside it; nil when no --dir has
// the feed. A feed inside a parent --dir is opened through the parent's
// Root, so a symbolic link there cannot lead outside the parent either.
func (s *Server) openFeed(name string) (*os.Root, string) {
	for _, d := range s.dirs {
		if filepath.Base(d) == name {
			if r, err := os.OpenRoot(d); err == nil {
				return r, d
			}
		}
	}
	for _, d := range s.dirs {
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
