package feedbuild

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"time"
)

// FetchConfig configures how URL sources are fetched and when a fetched
// list is accepted. Zero fields take the defaults below (docs/feeds.md
// says why each is what it is).
type FetchConfig struct {
	// MaxBytes caps one list's body; a longer one is refused while it
	// streams (never held whole) and the last good copy is kept. Default
	// 256 MiB, the node's own cap on one feed file.
	MaxBytes int64 `yaml:"max_bytes"`
	// ConnectTimeout bounds the TCP connect and the TLS handshake; default 10s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// Timeout bounds one attempt from the request to the body's last byte;
	// default 5m (a 256 MiB list at about 1 MB/s).
	Timeout time.Duration `yaml:"timeout"`
	// IdleTimeout cuts an attempt when the server sends nothing for this
	// long (the headers, or the next bytes of the body): a server that
	// trickles or stalls fails well before Timeout. Default 30s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// CAFile is a PEM file of CA certificates trusted beside the system's,
	// for list servers with a private CA. Certificates are always verified.
	CAFile string `yaml:"ca_file"`
	// Attempts is how often one fetch is tried when it fails transiently (a
	// network error, a timeout, HTTP 5xx, 408, 429); default 4. An HTTP 4xx
	// answer, a refused certificate and an over-size list are not retried.
	Attempts int `yaml:"attempts"`
	// BackoffBase and BackoffMax shape the wait between attempts: full
	// jitter over BackoffBase·2^(attempt-1), capped at BackoffMax.
	// Defaults 1s and 30s.
	BackoffBase time.Duration `yaml:"backoff_base"`
	BackoffMax  time.Duration `yaml:"backoff_max"`
	// MaxShrink refuses a list whose import gives fewer than (1-MaxShrink)
	// times the entries of its last good import (a truncated download, an
	// error page served as 200); the last good copy is kept. Default 0.5;
	// 1 turns the check off.
	MaxShrink float64 `yaml:"max_shrink"`
}

// Defaults of FetchConfig.
const (
	DefaultFetchMaxBytes       = 256 << 20
	DefaultFetchConnectTimeout = 10 * time.Second
	DefaultFetchTimeout        = 5 * time.Minute
	DefaultFetchIdleTimeout    = 30 * time.Second
	DefaultFetchAttempts       = 4
	DefaultFetchBackoffBase    = time.Second
	DefaultFetchBackoffMax     = 30 * time.Second
	DefaultMaxShrink           = 0.5
)

// Validate checks the fields a file or flags may set; errors name the key.
func (c FetchConfig) Validate() error {
	var errs []error
	neg := func(key string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative; leave it out for the default", key, d))
		}
	}
	if c.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("max_bytes: %d is negative; leave it out for the default (%d)", c.MaxBytes, DefaultFetchMaxBytes))
	}
	neg("connect_timeout", c.ConnectTimeout)
	neg("timeout", c.Timeout)
	neg("idle_timeout", c.IdleTimeout)
	neg("backoff_base", c.BackoffBase)
	neg("backoff_max", c.BackoffMax)
	if c.Attempts < 0 {
		errs = append(errs, fmt.Errorf("attempts: %d is negative; 1 means no retry", c.Attempts))
	}
	if c.MaxShrink < 0 || c.MaxShrink > 1 {
		errs = append(errs, fmt.Errorf("max_shrink: %v is not a share from 0 to 1 (0.5 refuses a list that lost more than half its entries; 1 turns the check off)", c.MaxShrink))
	}
	if c.CAFile != "" {
		if _, err := loadCAs(c.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("ca_file: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (c *FetchConfig) defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultFetchMaxBytes
	}
	def(&c.ConnectTimeout, DefaultFetchConnectTimeout)
	def(&c.Timeout, DefaultFetchTimeout)
	def(&c.IdleTimeout, DefaultFetchIdleTimeout)
	def(&c.BackoffBase, DefaultFetchBackoffBase)
	def(&c.BackoffMax, DefaultFetchBackoffMax)
	if c.Attempts == 0 {
		c.Attempts = DefaultFetchAttempts
	}
	if c.MaxShrink == 0 {
		c.MaxShrink = DefaultMaxShrink
	}
}

func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// Fetcher fetches URL sources: conditional GETs, the size cap, the
// timeouts and the retries of its FetchConfig. It is safe for concurrent
// use and holds idle connections between builds.
type Fetcher struct {
	cfg    FetchConfig
	client *http.Client
}

// NewFetcher validates cfg and builds the HTTP client.
func NewFetcher(cfg FetchConfig) (*Fetcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pool, err := loadCAs(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.IdleTimeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
		// The transport asks for gzip and undoes it, so max_bytes bounds
		// the decompressed body: what is stored and parsed, and what a
		// gzip bomb would inflate.
	}
	return &Fetcher{cfg: cfg, client: &http.Client{Transport: tr}}, nil
}

// Config is the configuration in effect, defaults filled in.
func (f *Fetcher) Config() FetchConfig { return f.cfg }

// validators are a cached body's HTTP validators, sent back as
// If-None-Match and If-Modified-Since.
type validators struct {
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
}

// fetchResult is one fetch's outcome.
type fetchResult struct {
	NotModified bool       // 304: the cached body stands
	Size        int64      // bytes written to dst
	Validators  validators // of the new body
	Attempts    int
}

// permanentError is a failure a retry would repeat: an HTTP 4xx, an
// over-size list, a refused certificate.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// errTooLarge is wrapped by a fetch refused for its size.
var errTooLarge = errors.New("the list is larger than max_bytes")

// errStalled is the cause of an attempt cut by IdleTimeout.
var errStalled = errors.New("the server sent nothing")

// fetch GETs rawURL into dst (truncated first on every attempt), sending
// cond's validators when hasCached. It retries transient failures with
// exponential backoff and full jitter; ctx's end stops it at once.
func (f *Fetcher) fetch(ctx context.Context, rawURL string, cond validators, hasCached bool, dst *os.File) (fetchResult, error) {
	var res fetchResult
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		r, err := f.attempt(ctx, rawURL, cond, hasCached, dst)
		if err == nil {
			r.Attempts = attempt
			return r, nil
		}
		var perm *permanentError
		if errors.As(err, &perm) || ctx.Err() != nil || attempt >= f.cfg.Attempts {
			if attempt > 1 {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			return res, err
		}
		wait := f.cfg.BackoffMax
		if attempt <= 30 { // beyond, the shift overflows; the cap is long reached
			wait = min(f.cfg.BackoffBase<<(attempt-1), f.cfg.BackoffMax)
		}
		// Full jitter: many feeds whose sources share a server failing
		// together do not come back in step.
		wait = time.Duration(rand.Int64N(int64(wait)) + 1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, fmt.Errorf("%w (after %d attempts)", err, attempt)
		case <-t.C:
		}
	}
}

func (f *Fetcher) attempt(ctx context.Context, rawURL string, cond validators, hasCached bool, dst *os.File) (fetchResult, error) {
	if err := dst.Truncate(0); err != nil {
		return fetchResult{}, &permanentError{err}
	}
	if _, err := dst.Seek(0, io.SeekStart); err != nil {
		return fetchResult{}, &permanentError{err}
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	ctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return fetchResult{}, &permanentError{err}
	}
	req.Header.Set("User-Agent", "svc-pf-feed-build")
	if hasCached {
		if cond.ETag != "" {
			req.Header.Set("If-None-Match", cond.ETag)
		}
		if cond.LastModified != "" {
			req.Header.Set("If-Modified-Since", cond.LastModified)
		}
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return fetchResult{}, classify(ctx, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && hasCached:
		return fetchResult{NotModified: true}, nil
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return fetchResult{}, fmt.Errorf("HTTP %s", resp.Status)
	default:
		return fetchResult{}, &permanentError{fmt.Errorf("HTTP %s: check the URL (a 4xx is not retried)", resp.Status)}
	}
	if resp.ContentLength > f.cfg.MaxBytes {
		return fetchResult{}, &permanentError{fmt.Errorf("%w (%d bytes announced, max_bytes %d)", errTooLarge, resp.ContentLength, f.cfg.MaxBytes)}
	}
	// The idle timer: every read that returns bytes pushes it back; when
	// it fires the request's context ends, which unblocks the read.
	idle := time.AfterFunc(f.cfg.IdleTimeout, func() { cancelCause(errStalled) })
	defer idle.Stop()
	body := &idleReader{r: io.LimitReader(resp.Body, f.cfg.MaxBytes+1), timer: idle, d: f.cfg.IdleTimeout}
	n, err := io.Copy(dst, body)
	if err != nil {
		return fetchResult{}, classify(ctx, err)
	}
	if n > f.cfg.MaxBytes {
		return fetchResult{}, &permanentError{fmt.Errorf("%w (%d): the download was stopped there", errTooLarge, f.cfg.MaxBytes)}
	}
	return fetchResult{Size: n, Validators: validators{ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}}, nil
}

// classify names a transport error: a stall, a timeout, a certificate
// the client refuses (permanent), or a network error (transient).
func classify(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errStalled) {
		return fmt.Errorf("%w for the idle timeout; the transfer was cut", errStalled)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timeout: %w", err)
	}
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalid) || errors.As(err, &verify) {
		return &permanentError{fmt.Errorf("%w: the server's certificate is not trusted; for a private CA set ca_file (--ca-file)", err)}
	}
	return err
}

// idleReader pushes the idle timer back whenever bytes arrive.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}
