package resolver

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckEvery is how often a handshake looks at the certificate files
// again: at most once a second, so that a busy listener does not stat
// two files per connection.
const certCheckEvery = time.Second

// certStore serves the encrypted listeners' certificate from
// dns.tls.cert_file and key_file, and picks up a renewed pair without a
// restart: a handshake more than certCheckEvery after the last check
// compares the files' modification times and sizes with those loaded,
// and loads the pair again when either changed. A new pair that does not
// load (half-written, a key that does not match) keeps the old one
// serving and is logged; the next check tries again, so a renewal
// written in two steps heals by itself.
type certStore struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	checked time.Time
	stamp   [2]fileStamp // cert, key as loaded
}

// fileStamp is what says a file changed.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// newCertStore loads the pair once; an error names the keys to fix.
func newCertStore(certFile, keyFile string, log *slog.Logger) (*certStore, error) {
	s := &certStore{certFile: certFile, keyFile: keyFile, log: log}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("dns.tls.cert_file / dns.tls.key_file: %w (set them to a PEM certificate chain and its key)", err)
	}
	s.checked = time.Now()
	return s, nil
}

// load reads both files; on an error nothing changes.
func (s *certStore) load() error {
	cs, err := stampOf(s.certFile)
	if err != nil {
		return err
	}
	ks, err := stampOf(s.keyFile)
	if err != nil {
		return err
	}
	c, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return err
	}
	s.cert, s.stamp = &c, [2]fileStamp{cs, ks}
	return nil
}

// get is the listeners' tls.Config.GetCertificate.
func (s *certStore) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.checked) >= certCheckEvery {
		s.checked = now
		s.reloadIfChanged()
	}
	return s.cert, nil
}

func (s *certStore) reloadIfChanged() {
	cs, cerr := stampOf(s.certFile)
	ks, kerr := stampOf(s.keyFile)
	if cerr == nil && kerr == nil && cs == s.stamp[0] && ks == s.stamp[1] {
		return
	}
	old := s.stamp
	if err := s.load(); err != nil {
		// Retried at the next check only if the files change again:
		// remember what failed, so that a broken pair is logged once.
		s.stamp = [2]fileStamp{cs, ks}
		if cs == old[0] && ks == old[1] {
			return
		}
		s.log.Error("dns.tls: the changed certificate files do not load; still serving the previous certificate "+
			"(write a matching PEM certificate and key to dns.tls.cert_file and key_file)",
			"cert_file", s.certFile, "key_file", s.keyFile, "err", err)
		return
	}
	s.log.Info("dns.tls: certificate reloaded", "cert_file", s.certFile)
}

// notAfter is the expiry of the certificate served.
func (s *certStore) notAfter() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert == nil || s.cert.Leaf == nil {
		return time.Time{}
	}
	return s.cert.Leaf.NotAfter
}
