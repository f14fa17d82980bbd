package feedbuild

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

func TestNormalizeName(t *testing.T) {
	for _, c := range []struct {
		in, want string
		cause    Cause
	}{
		{in: "example.com", want: "example.com"},
		{in: "Ads.Example.COM.", want: "ads.example.com"}, // absolute form, any case
		{in: "_dmarc.example.com", want: "_dmarc.example.com"},
		{in: "r3---sn-apo3qvuoxuxbt-j5pe.googlevideo.com", want: "r3---sn-apo3qvuoxuxbt-j5pe.googlevideo.com"},
		{in: "bücher.de", want: "xn--bcher-kva.de"},
		{in: "BÜCHER.DE", want: "xn--bcher-kva.de"},
		{in: "ＥＸＡＭＰＬＥ．com", want: "example.com"}, // full-width letters and dot map
		{in: "xn--bcher-kva.de", want: "xn--bcher-kva.de"},
		{in: "XN--BCHER-KVA.DE", want: "xn--bcher-kva.de"},
		{in: "☃.net", want: "xn--n3h.net"},
		{in: "faß.de", want: "xn--fa-hia.de"},              // non-transitional: ß stays ß
		{in: "xn--abc.com", cause: CauseInvalidName},       // not valid Punycode of a valid label
		{in: "xn--ls8h.example", want: "xn--ls8h.example"}, // 💩, valid under UTS #46
		{in: "a⒈com", cause: CauseInvalidName},             // disallowed under STD3
		{in: "bü_cher.de", cause: CauseInvalidName},        // '_' passes only in ASCII names
		{in: "a..b.com", cause: CauseInvalidName},
		{in: "", cause: CauseInvalidName},
		{in: ".", cause: CauseInvalidName},
		{in: "exa mple.com", cause: CauseInvalidName},
		{in: "example.com/x", cause: CauseInvalidName},
		{in: strings.Repeat("a", 64) + ".com", cause: CauseInvalidName},
		{in: strings.Repeat("abcdefghi.", 26) + "com", cause: CauseInvalidName}, // 263 bytes
		{in: "1.2.3.4", cause: CauseIP},
		{in: "2001:db8::1", cause: CauseIP},
		{in: "[2001:db8::1]", cause: CauseIP},
		{in: "10.1.2", cause: CauseInvalidName}, // part of an IP: no TLD is numeric
		{in: "localhost", cause: CauseSingleLabel},
		{in: "com", cause: CauseSingleLabel},
	} {
		got, cause := normalizeName(c.in)
		if got != c.want || cause != c.cause {
			t.Errorf("normalizeName(%q) = %q, %q; want %q, %q", c.in, got, cause, c.want, c.cause)
		}
		if got != "" && feed.CheckName(got) != nil {
			t.Errorf("normalizeName(%q) = %q, which feed.CheckName refuses", c.in, got)
		}
	}
}

func TestParseSource(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Source
		err  string
	}{
		{in: "adblock:1:easylist.txt", want: Source{Format: "adblock", Codes: []uint16{1}, Path: "easylist.txt"}},
		{in: "hosts:7,3:/etc/hosts", want: Source{Format: "hosts", Codes: []uint16{3, 7}, Path: "/etc/hosts"}},
		{in: "domains:4:C:/lists/a:b.txt", want: Source{Format: "domains", Codes: []uint16{4}, Path: "C:/lists/a:b.txt"}},
		{in: "csv:-:list.csv", want: Source{Format: "csv", Path: "list.csv"}},
		{in: "rpz:65535:zone.rpz", want: Source{Format: "rpz", Codes: []uint16{65535}, Path: "zone.rpz"}},
		{in: "csv:1:list.csv", err: "takes its codes from its lines"},
		{in: "hosts:-:hosts", err: "needs a category code"},
		{in: "hosts:65536:hosts", err: "0 to 65535"},
		{in: "hosts:x:hosts", err: "0 to 65535"},
		{in: "json:1:x", err: `unknown format "json"`},
		{in: "hosts:1:", err: "FORMAT:CODE:PATH"},
		{in: "easylist.txt", err: "FORMAT:CODE:PATH"},
	} {
		got, err := ParseSource(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseSource(%q) = %v, want error %q", c.in, err, c.err)
			}
		case err != nil:
			t.Errorf("ParseSource(%q): %v", c.in, err)
		case !reflect.DeepEqual(got, c.want):
			t.Errorf("ParseSource(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestHostsLine(t *testing.T) {
	for _, c := range []struct {
		in      string
		names   []string
		skipped []Cause
	}{
		{in: "0.0.0.0 ads.example.com", names: []string{"ads.example.com"}},
		{in: "127.0.0.1\tads.example.com track.example.net  # trackers", names: []string{"ads.example.com", "track.example.net"}},
		{in: "127.0.0.2 ads.example.com", names: []string{"ads.example.com"}}, // all of 127/8 is loopback
		{in: ":: ads.example.com", names: []string{"ads.example.com"}},
		{in: "::1 ads.example.com", names: []string{"ads.example.com"}},
		{in: "::ffff:0.0.0.0 ads.example.com", names: []string{"ads.example.com"}},
		{in: "0.0.0.0 Bücher.example", names: []string{"xn--bcher-kva.example"}},
		{in: "0.0.0.0 ads.example.com.", names: []string{"ads.example.com"}},
		{in: "# a comment", skipped: []Cause{CauseComment}},
		{in: "   # indented comment", skipped: []Cause{CauseComment}},
		{in: "", skipped: nil},
		{in: "   ", skipped: nil},
		{in: "127.0.0.1 localhost", skipped: []Cause{CauseLocalName}},
		{in: "127.0.0.1 localhost.localdomain localhost4", names: []string{}, skipped: []Cause{CauseLocalName, CauseSingleLabel}},
		{in: "::1 ip6-localhost ip6-loopback", skipped: []Cause{CauseLocalName, CauseLocalName}},
		{in: "255.255.255.255 broadcasthost", skipped: []Cause{CauseLocalName}},
		{in: "0.0.0.0 0.0.0.0", skipped: []Cause{CauseIP}},
		{in: "0.0.0.0 ads.localhost", skipped: []Cause{CauseLocalName}},
		{in: "216.239.38.120 www.google.com", skipped: []Cause{CauseNonSink}}, // a safe-search redirect, not a block
		{in: "0.0.0.0 *.example.com", skipped: []Cause{CauseWildcard}},
		{in: "0.0.0.0 bad_name!.com ok.example", names: []string{"ok.example"}, skipped: []Cause{CauseInvalidName}},
		{in: "0.0.0.0 tld", skipped: []Cause{CauseSingleLabel}},
		{in: "ads.example.com", skipped: []Cause{CauseMalformed}}, // a domain list, not a hosts file
		{in: "0.0.0.0", skipped: []Cause{CauseMalformed}},
		{in: "0.0.0.0/8 x.com", skipped: []Cause{CauseMalformed}},
	} {
		names, skipped := parseHostsLine(c.in)
		if !slices.Equal(names, c.names) || !slices.Equal(skipped, c.skipped) {
			t.Errorf("parseHostsLine(%q) = %q, %q; want %q, %q", c.in, names, skipped, c.names, c.skipped)
		}
	}
}

func TestDomainsLine(t *testing.T) {
	for _, c := range []struct {
		in, want string
		cause    Cause
	}{
		{in: "ads.example.com", want: "ads.example.com"},
		{in: "  Ads.Example.com.  ", want: "ads.example.com"},
		{in: "ads.example.com # tracker", want: "ads.example.com"},
		{in: "bücher.example", want: "xn--bcher-kva.example"},
		{in: "", cause: ""},
		{in: "# comment", cause: CauseComment},
		{in: "! Title: a list", cause: CauseComment},
		{in: "1.2.3.4", cause: CauseIP},
		{in: "2001:db8::1", cause: CauseIP},
		{in: "||ads.example.com/x.js^$all", cause: CauseAdblockRule},
		{in: "||ads.example.com^", cause: CauseAdblockRule},
		{in: "@@||ok.example.com^", cause: CauseAdblockRule},
		{in: "0.0.0.0 ads.example.com", cause: CauseMalformed},
		{in: "http://ads.example.com/", cause: CauseMalformed},
		{in: "*.example.com", cause: CauseWildcard},
		{in: "-.example..com", cause: CauseInvalidName},
		{in: "intranet", cause: CauseSingleLabel},
	} {
		got, cause := parseDomainsLine(c.in)
		if got != c.want || cause != c.cause {
			t.Errorf("parseDomainsLine(%q) = %q, %q; want %q, %q", c.in, got, cause, c.want, c.cause)
		}
	}
}

func TestCSVLine(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  Entry
		cause Cause
	}{
		{in: "ads.example.com,1", want: Entry{Name: "ads.example.com", Codes: []uint16{1}}},
		{in: "ads.example.com,3;1;3", want: Entry{Name: "ads.example.com", Codes: []uint16{1, 3}}},
		{in: ` "Ads.Example.com" , "2 ; 5" `, want: Entry{Name: "ads.example.com", Codes: []uint16{2, 5}}},
		{in: "example.com/ads/banner.js?x=1,4", want: Entry{Name: "example.com", Path: "/ads/banner.js?x=1", Codes: []uint16{4}}},
		{in: "bücher.example/Pfad,7", want: Entry{Name: "xn--bcher-kva.example", Path: "/Pfad", Codes: []uint16{7}}},
		{in: "example.com/,4", want: Entry{Name: "example.com", Path: "/", Codes: []uint16{4}}},
		{in: "", cause: ""},
		{in: "# comment", cause: CauseComment},
		{in: "domain,codes", cause: CauseSingleLabel}, // a header line: "domain" is no name
		{in: "ads.example.com,advertising", cause: CauseBadCode},
		{in: "ads.example.com,", cause: CauseBadCode},
		{in: "ads.example.com,70000", cause: CauseBadCode},
		{in: "ads.example.com,1,2", cause: CauseMalformed},
		{in: "ads.example.com", cause: CauseMalformed},
		{in: "1.2.3.4,1", cause: CauseIP},
		{in: "*.example.com,1", cause: CauseWildcard},
		{in: "exa mple.com,1", cause: CauseInvalidName},
		{in: "example.com/a\x01b,1", cause: CauseBadPath},
		{in: "example.com/" + strings.Repeat("a", maxPath) + ",1", cause: CauseBadPath},
	} {
		got, cause := parseCSVLine(c.in)
		if cause != c.cause || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseCSVLine(%q) = %+v, %q; want %+v, %q", c.in, got, cause, c.want, c.cause)
		}
	}
}

func TestAdblockLine(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  Entry
		cause Cause
	}{
		// Imported: the whole host.
		{in: "||ads.example.com^", want: Entry{Name: "ads.example.com"}},
		{in: "||Ads.Example.com^", want: Entry{Name: "ads.example.com"}},
		{in: "||ads.example.com", want: Entry{Name: "ads.example.com"}},
		{in: "||ads.example.com^|", want: Entry{Name: "ads.example.com"}},
		{in: "||ads.example.com^$all", want: Entry{Name: "ads.example.com"}},
		{in: "||ads.example.com^$doc", want: Entry{Name: "ads.example.com"}},
		{in: "||ads.example.com^$document,important", want: Entry{Name: "ads.example.com"}},
		{in: "||bücher.example^", want: Entry{Name: "xn--bcher-kva.example"}},
		{in: "  ||ads.example.com^  ", want: Entry{Name: "ads.example.com"}},
		// Imported: a path of the host, never the whole host.
		{in: "||example.com/ads/banner.js^", want: Entry{Name: "example.com", Path: "/ads/banner.js"}},
		{in: "||example.com/ads/", want: Entry{Name: "example.com", Path: "/ads/"}},
		{in: "||example.com/dl/x.exe^$all", want: Entry{Name: "example.com", Path: "/dl/x.exe"}},
		{in: "||example.com/uc?export=download&id=1^$all", want: Entry{Name: "example.com", Path: "/uc?export=download&id=1"}},
		{in: "||example.com/Case/Kept", want: Entry{Name: "example.com", Path: "/Case/Kept"}},
		// Skipped.
		{in: "", cause: ""},
		{in: "! Title: EasyList", cause: CauseComment},
		{in: "[Adblock Plus 2.0]", cause: CauseComment},
		{in: "# a comment", cause: CauseComment},
		{in: "example.com##.ad", cause: CauseCosmetic},
		{in: "##.ad-banner", cause: CauseCosmetic},
		{in: "example.com#@#.ad", cause: CauseCosmetic},
		{in: "example.com#?#.ad:has(> a)", cause: CauseCosmetic},
		{in: "example.com#$#.ad { display: none !important; }", cause: CauseCosmetic},
		{in: "example.com#@$#.ad { }", cause: CauseCosmetic},
		{in: "example.com#%#window.x = 1;", cause: CauseCosmetic},
		{in: "example.com#@%#window.x = 1;", cause: CauseCosmetic},
		{in: "example.com##+js(set, x, 1)", cause: CauseCosmetic},
		{in: "example.com$$script[data-src]", cause: CauseCosmetic},
		{in: "example.com$@$script", cause: CauseCosmetic},
		{in: "@@||ok.example.com^", cause: CauseException},
		{in: "@@||example.com/ads.js$script,domain=example.org", cause: CauseException},
		{in: "||ads.example.com^$third-party", cause: CauseOption},
		{in: "||ads.example.com^$script", cause: CauseOption},
		{in: "||ads.example.com^$image", cause: CauseOption},
		{in: "||ads.example.com^$popup", cause: CauseOption},
		{in: "||ads.example.com^$domain=example.org", cause: CauseOption},
		{in: "||ads.example.com^$doc,to=com", cause: CauseOption},
		{in: "||ads.example.com^$all,~doc", cause: CauseOption},
		{in: "||ads.example.com^$important,3p", cause: CauseOption},
		{in: "||com^$doc,ipaddress=1.2.3.4", cause: CauseOption},
		{in: "||ads.example.com^$", cause: CauseOption},
		{in: "||ads.example.com^$badfilter", cause: CauseBadfilter},
		{in: `/^https?:\/\/ads\.[a-z]+\.com\//`, cause: CauseRegex},
		{in: `/banner\d+/$image`, cause: CauseRegex},
		{in: "/ads/", cause: CauseNotHostRule},
		{in: "ad.js", cause: CauseNotHostRule},
		{in: "-ad-banner.", cause: CauseNotHostRule},
		{in: "|https://ads.example.com^", cause: CauseNotHostRule},
		{in: "ads.example.com", cause: CauseNotHostRule},
		{in: "1.2.3.4", cause: CauseNotHostRule},
		{in: "||cacheserve.*/promo/", cause: CausePattern},
		{in: "||*.example.com^", cause: CausePattern},
		{in: "||ads.", cause: CausePattern},
		{in: "||.example.com^", cause: CausePattern},
		{in: "||example.com:8443/x^", cause: CausePattern},
		{in: "||http://example.com^", cause: CausePattern},
		{in: "||example.com^*/ads", cause: CausePattern},
		{in: "||example.com/*/ads.js", cause: CausePattern},
		{in: "||example.com/ads|", cause: CausePattern},
		{in: "||example.com/a^b", cause: CausePattern},
		{in: "||^", cause: CausePattern},
		{in: "||check-tl-$all", cause: CausePattern}, // a host prefix
		{in: "||xyz/akbank/$doc", cause: CauseSingleLabel},
		{in: "||1.2.3.4^", cause: CauseIP},
		{in: "||[2001:db8::1]^", cause: CauseIP},
		{in: "||exa_mple!.com^", cause: CauseInvalidName},
		{in: "||javascriptbasics^", cause: CauseSingleLabel},
		{in: "||example.com/" + strings.Repeat("a", maxPath), cause: CauseBadPath},
	} {
		r := parseAdblockLine(c.in)
		if r.cause != c.cause || !reflect.DeepEqual(r.entry, c.want) {
			t.Errorf("parseAdblockLine(%q) = %+v, %q; want %+v, %q", c.in, r.entry, r.cause, c.want, c.cause)
		}
	}
}

// importAll runs an importer over text and returns its keys (sorted) and
// its counts.
func importAll(t *testing.T, format string, codes []uint16, text string) ([]string, Stats) {
	t.Helper()
	var keys []string
	st, err := ImportReader(format, codes, strings.NewReader(text), func(e Entry) {
		if len(e.Codes) == 0 {
			t.Errorf("entry %s has no codes", e.Key())
		}
		keys = append(keys, e.Key())
	})
	if err != nil {
		t.Fatalf("%s import: %v", format, err)
	}
	slices.Sort(keys)
	return keys, st
}

func TestAdblockBadfilterAndExceptions(t *testing.T) {
	keys, st := importAll(t, FormatAdblock, []uint16{1}, `
||ads.example.com^
||disabled.example^
||disabled.example^$badfilter
||opts.example^$doc,important
||opts.example^$important,doc,badfilter
||cdn.example^
@@||good.cdn.example^
||allowed.example^
||sub.allowed.example^
||sub.allowed.example/path^
||strong.allowed.example^$important
@@||allowed.example^
@@||conditional.example^$script
||conditional.example^
@@||revoked.example^
@@||revoked.example^$badfilter
||revoked.example^
`)
	want := []string{"ads.example.com", "cdn.example", "conditional.example", "revoked.example", "strong.allowed.example"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %q, want %q", keys, want)
	}
	wantSkipped := map[Cause]int{CauseDisabled: 2, CauseBadfilter: 3, CauseExcepted: 3, CauseException: 4}
	if !reflect.DeepEqual(st.Skipped, wantSkipped) || st.Imported != len(want) {
		t.Errorf("stats = %+v, want imported %d, skipped %v", st, len(want), wantSkipped)
	}
	if st.Notes[noteExceptionUnder] != 1 { // good.cdn.example under the blocked cdn.example
		t.Errorf("notes = %v, want %s 1", st.Notes, noteExceptionUnder)
	}
}

func TestRPZ(t *testing.T) {
	keys, st := importAll(t, FormatRPZ, []uint16{9}, `; an RPZ zone
$TTL 300
$ORIGIN rpz.example.
@ IN SOA ns.rpz.example. hostmaster.rpz.example. (
        2024010101 ; serial
        3600 600 86400 300 )
  IN NS ns.rpz.example.
  3600 IN NS ns2.rpz.example.
bad.example.com      CNAME .
*.bad.example.com    CNAME .
wild.example.net     CNAME .
*.wildonly.example   CNAME *.
drop.example         CNAME rpz-drop.
tcp.example          CNAME rpz-tcp-only.
walled.example       A     192.0.2.1
                     AAAA  2001:db8::1
ok.example           CNAME rpz-passthru.
old-ok.example       CNAME old-ok.example.
Upper.Example        300 IN CNAME .
bücher.example       CNAME .
abs.example.rpz.example. CNAME .
out.example.org.     CNAME .
32.1.2.0.192.rpz-ip       CNAME .
ns.bad.rpz-nsdname        CNAME .
32.2.2.0.192.rpz-nsip     CNAME .
24.0.2.0.10.rpz-client-ip CNAME .
sub                  NS    ns.elsewhere.
10.0.0.1             CNAME .
tld                  CNAME .
*                    CNAME .
esc\.aped.example    CNAME .
txt.example          TXT   "a ; quoted ( string"
$ORIGIN grouped.example.rpz.example.
www                  CNAME .
@                    CNAME .
$ORIGIN elsewhere.org.
lost                 CNAME .
`)
	want := []string{
		"abs.example", "bad.example.com", "bad.example.com", "drop.example", "grouped.example",
		"tcp.example", "txt.example", "upper.example", "walled.example",
		"wild.example.net", "wildonly.example", "www.grouped.example", "xn--bcher-kva.example",
	}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %q\nwant   %q", keys, want)
	}
	// The node's parser reads the zone (rpz.Parse): comments are not
	// records, NS and the SOA's repeats are zone-data, and walled.example's
	// A and AAAA are one trigger.
	wantSkipped := map[Cause]int{
		Cause(rpz.SkipZoneData): 3, CausePassthru: 2, Cause(rpz.SkipOutOfZone): 2,
		Cause(rpz.SkipIP): 1, Cause(rpz.SkipNSDName): 1, Cause(rpz.SkipNSIP): 1, Cause(rpz.SkipClientIP): 1,
		CauseIP: 1, CauseSingleLabel: 1, CauseWildcard: 1, CauseInvalidName: 1,
	}
	if !reflect.DeepEqual(st.Skipped, wantSkipped) {
		t.Errorf("skipped = %v\nwant      %v", st.Skipped, wantSkipped)
	}
	if st.Notes[noteWildcardOnly] != 1 { // *.wildonly.example has no apex trigger
		t.Errorf("notes = %v, want %s 1", st.Notes, noteWildcardOnly)
	}
}

// TestRPZOrigins: names are placed as the node's RPZ places them (rpz.Parse,
// internal/rpz/README.md): the SOA's owner is the apex, relative names
// before any $ORIGIN are relative to the root; a file that the node would
// refuse, feed build refuses too.
func TestRPZOrigins(t *testing.T) {
	for _, c := range []struct {
		name, zone string
		want       []string
		skipped    map[Cause]int
	}{
		{"an absolute SOA owner is the apex", "rpz.example. SOA ns. h. 1 2 3 4 5\nbad.example.rpz.example. CNAME .\nx.bad.example.rpz.example. CNAME .\nbad.example CNAME .\n",
			[]string{"bad.example", "x.bad.example"}, map[Cause]int{Cause(rpz.SkipOutOfZone): 1}},
		{"the root as apex: relative owners are the triggers", "@ SOA ns. h. 1 2 3 4 5\nbad.example CNAME .\n",
			[]string{"bad.example"}, nil},
		{"$ORIGIN names the apex", "$ORIGIN rpz.\n@ SOA ns. h. 1 2 3 4 5\n$ORIGIN example.rpz.\nbad CNAME .\n@ NS ns.\n",
			[]string{"bad.example"}, map[Cause]int{Cause(rpz.SkipZoneData): 1}},
		{"$GENERATE is expanded", "$ORIGIN rpz.\n@ SOA ns. h. 1 2 3 4 5\n$GENERATE 1-3 h$.example CNAME .\n",
			[]string{"h1.example", "h2.example", "h3.example"}, nil},
	} {
		keys, st := importAll(t, FormatRPZ, []uint16{1}, c.zone)
		if !slices.Equal(keys, c.want) || !reflect.DeepEqual(st.Skipped, c.skipped) {
			t.Errorf("%s: keys %q skipped %v; want %q %v", c.name, keys, st.Skipped, c.want, c.skipped)
		}
	}
	for _, c := range []struct{ zone, err string }{
		{"$INCLUDE other.zone\n", "$INCLUDE"},
		{"bad.example CNAME .\n", "not the zone's SOA"},
		{"@ SOA ns. h. 1 2 3 4 5\nbad.example 300 IN\n", "line: 2"},
		{"@ SOA ns. h. ( 1 2 3\n 4 5\n", "rpz zone"},
		{"@ SOA ns. h. 1 2 3 4 5\nx CNAME .\nx CNAME rpz-drop.\n", "conflicts"},
	} {
		_, err := ImportReader(FormatRPZ, []uint16{1}, strings.NewReader(c.zone), func(Entry) {})
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("zone %q: error %v, want %q", c.zone, err, c.err)
		}
	}
}

// TestImportersCountEveryLine: every non-blank line of a one-entry-per-line
// format is imported or skipped with a cause, never dropped silently.
func TestImportersCountEveryLine(t *testing.T) {
	for _, c := range []struct{ format, text string }{
		{FormatDomains, "a.example\n\n# c\n1.2.3.4\n||x.example^\n*.w.example\nbad name\nb.example\n"},
		{FormatAdblock, "! c\n||a.example^\nexample.com##.ad\n@@||b.example^\n||c.example^$script\n/ads/\n||d.example/p^\n\n"},
		{FormatCSV, "# c\na.example,1\nb.example/p,2;3\nbad,x\n\n"},
	} {
		codes := []uint16{1}
		if c.format == FormatCSV {
			codes = nil
		}
		_, st := importAll(t, c.format, codes, c.text)
		lines := 0
		for l := range strings.SplitSeq(c.text, "\n") {
			if strings.TrimSpace(l) != "" {
				lines++
			}
		}
		if st.Imported+st.SkippedTotal() != lines {
			t.Errorf("%s: imported %d + skipped %d != %d lines (%v)", c.format, st.Imported, st.SkippedTotal(), lines, st.Skipped)
		}
	}
}

func TestImportErrors(t *testing.T) {
	long := strings.Repeat("a", maxLine+1)
	if _, err := ImportReader(FormatDomains, []uint16{1}, strings.NewReader("a.example\n"+long), func(Entry) {}); err == nil || !strings.Contains(err.Error(), "line 2 is longer") {
		t.Errorf("a line over the limit: %v", err)
	}
	if _, err := ImportReader("json", nil, strings.NewReader(""), func(Entry) {}); err == nil {
		t.Error("an unknown format imported")
	}
	if _, err := Import(Source{Format: FormatHosts, Codes: []uint16{1}, Path: "/nonexistent/hosts"}, func(Entry) {}); err == nil || !strings.Contains(err.Error(), "hosts:1:/nonexistent/hosts") {
		t.Errorf("a missing file: %v", err)
	}
}

func TestStatsString(t *testing.T) {
	st := Stats{Imported: 5, Skipped: map[Cause]int{CauseComment: 2, CauseIP: 2, CauseCosmetic: 9}, Notes: map[string]int{"n": 1}}
	if got, want := st.String(), "imported 5, skipped 13 (cosmetic 9, comment 2, ip 2); notes: n 1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
