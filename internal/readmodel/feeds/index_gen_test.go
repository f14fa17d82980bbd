package feeds

import (
	"strconv"
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// synthFeed is a deterministic feed shaped like the category feeds the
// index serves: registrable names under a spread of TLDs (a few of two
// labels, like co.uk), most bare, some under one or more subdomain
// labels (www, cdn, a tracker's hex label), ~3 % subdomains of another
// entry, 5 % URL path entries (half of them on a name that also has an
// entry of its own), and one to three codes from a skewed set of 60
// categories. Key i is a pure function of i, so benchmarks stream 10
// million lines without holding them, and queries that miss are made the
// same way from numbers past the feed's end: same shape, no entry, no
// parent in the feed either.
//
// Every key is distinct: each name carries a fixed-width base-36 serial
// (5 characters, so up to 36^5 ≈ 60 million) at the end of its
// registrable label.

const synthMax = 60_466_176 // 36^5

var (
	synthTLDs = []string{
		"com", "com", "com", "com", "com", "com", "com", "com", "com",
		"net", "org", "ru", "de", "info", "xyz", "top", "io", "co.uk",
		"com.br", "cn", "online", "site", "fr", "nl", "pl", "in", "club",
		"com.au", "co", "shop", "biz", "jp", "it", "es", "us", "tk", "cc",
	}
	synthSubs  = []string{"www", "m", "cdn", "api", "ads", "img", "static", "mail", "track", "s", "app", "login", "secure", "news", "shop"}
	synthSyll  = []string{"ka", "lo", "mi", "net", "tra", "de", "po", "zu", "ber", "sol", "gam", "ex", "ple", "ad", "cli", "ck", "fin", "max", "on", "re", "bit", "go", "top", "win", "play", "vid", "bet", "pro", "web", "hub"}
	synthSegs  = []string{"ads", "banner", "track", "pixel", "click", "promo", "api", "v1", "js", "img", "static", "redirect", "go", "out", "landing", "offer"}
	synthFiles = []string{"", "", "", "/index.php", "/ad.js", "/t.gif", "/r", "/c.php"}
)

// synthMix is the mixer behind every random choice: deterministic,
// and a bijection, so distinct inputs never collide.
func synthMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// synthRand draws successive choices from one seed.
type synthRand struct{ s uint64 }

func (r *synthRand) next() uint64 { r.s = synthMix(r.s); return r.s }

func (r *synthRand) n(k int) int { return int(r.next() % uint64(k)) }

// synthBase is the name of serial i: [subdomain labels.]word+serial.tld.
func synthBase(i int) string {
	r := synthRand{s: uint64(i)*0x2545f4914f6cdd1d + 1}
	var b strings.Builder
	switch p := r.n(100); {
	case p < 55:
	case p < 80:
		b.WriteString(synthSubs[r.n(len(synthSubs))])
		b.WriteByte('.')
	case p < 92:
		synthLabel(&b, &r, 3+r.n(10))
		b.WriteByte('.')
	case p < 98:
		b.WriteString(synthSubs[r.n(len(synthSubs))])
		b.WriteByte('.')
		synthLabel(&b, &r, 3+r.n(8))
		b.WriteByte('.')
	default:
		for range 3 {
			synthHex(&b, &r, 8+r.n(9))
			b.WriteByte('.')
		}
	}
	for k := 1 + r.n(4); k > 0; k-- {
		b.WriteString(synthSyll[r.n(len(synthSyll))])
	}
	if r.n(5) == 0 {
		b.WriteByte('-')
		b.WriteString(synthSyll[r.n(len(synthSyll))])
	}
	serial := strconv.FormatUint(uint64(i%synthMax)+synthMax, 36) // 6 digits, the first always 1
	b.WriteString(serial[1:])
	b.WriteByte('.')
	b.WriteString(synthTLDs[r.n(len(synthTLDs))])
	return b.String()
}

func synthLabel(b *strings.Builder, r *synthRand, n int) {
	for range n {
		b.WriteByte(byte('a' + r.n(26)))
	}
}

func synthHex(b *strings.Builder, r *synthRand, n int) {
	for range n {
		b.WriteByte("0123456789abcdef"[r.n(16)])
	}
}

func synthPath(r *synthRand) string {
	var b strings.Builder
	for k := 1 + r.n(3); k > 0; k-- {
		b.WriteByte('/')
		b.WriteString(synthSegs[r.n(len(synthSegs))])
	}
	b.WriteString(synthFiles[r.n(len(synthFiles))])
	return b.String()
}

// synthCodes is one to three sorted distinct codes, skewed towards the
// first categories, as real feeds are.
func synthCodes(r *synthRand) []uint16 {
	pick := func() uint16 {
		v := r.n(60 * 60)
		return uint16(60 - 1 - synthIsqrt(v)) // quadratic skew: low codes are rare, high ones common
	}
	codes := []uint16{pick()}
	switch p := r.n(100); {
	case p < 85:
	case p < 98:
		codes = append(codes, pick())
	default:
		codes = append(codes, pick(), pick())
	}
	return synthSorted(codes)
}

func synthIsqrt(v int) int {
	s := 0
	for (s+1)*(s+1) <= v {
		s++
	}
	return s
}

func synthSorted(c []uint16) []uint16 {
	for i := 1; i < len(c); i++ {
		for j := i; j > 0 && c[j] < c[j-1]; j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
	out := c[:1]
	for _, v := range c[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

// synthLine is key i of the feed.
func synthLine(i int) feed.Line {
	r := synthRand{s: uint64(i)*0x9e3779b97f4a7c15 + 7}
	l := feed.Line{Codes: synthCodes(&r)}
	switch {
	case i%32 == 1: // a subdomain of the previous entry's name
		l.Name = synthSubs[r.n(len(synthSubs))] + "." + synthBase(i-1)
	case i%40 == 7: // a path under the previous entry's name
		l.Name, l.Path = synthBase(i-1), synthPath(&r)
	case i%40 == 27: // a path on a name with no entry of its own
		l.Name, l.Path = synthBase(i), synthPath(&r)
	default:
		l.Name = synthBase(i)
	}
	return l
}

// synthQuery is a query for a feed of n keys: a hit on key i (the key's
// name, a subdomain of it in 3 of 10, and for a path key a URL under the
// path), or, for miss, a name shaped the same with no entry and no parent
// in the feed, which walks every parent.
func synthQuery(n, i int, miss bool) (name, path string) {
	if miss {
		return synthBase(n + i%(synthMax-n)), ""
	}
	l := synthLine(i % n)
	name = l.Name
	r := synthRand{s: uint64(i) + 99}
	if r.n(10) < 3 {
		name = synthSubs[r.n(len(synthSubs))] + "." + name
	}
	if l.Path != "" {
		path = l.Path + "/x?y=1"
	}
	return name, path
}
