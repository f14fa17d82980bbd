package policy

// Safe search (the safe_search setting, step 6 of the decision;
// docs/policy.md, Safe search): each engine's names answered with the CNAME
// the engine documents for enforcing its safe mode.
//
//   - Google: www.google.<domain> for every domain of
//     https://www.google.com/supported_domains → forcesafesearch.google.com
//   - Bing: www.bing.com → strict.bing.com
//   - DuckDuckGo: duckduckgo.com, www.duckduckgo.com, start.duckduckgo.com →
//     safe.duckduckgo.com
//   - YouTube: www.youtube.com, m.youtube.com, youtubei.googleapis.com,
//     youtube.googleapis.com, www.youtube-nocookie.com →
//     restrict.youtube.com (strict, the default) or
//     restrictmoderate.youtube.com (moderate, Options.YouTube)

// Engines.
const (
	EngineGoogle     = "google"
	EngineBing       = "bing"
	EngineDuckDuckGo = "duckduckgo"
	EngineYouTube    = "youtube"
)

// Safe names.
const (
	GoogleSafe      = "forcesafesearch.google.com"
	BingSafe        = "strict.bing.com"
	DuckDuckGoSafe  = "safe.duckduckgo.com"
	YouTubeStrict   = "restrict.youtube.com"
	YouTubeModerate = "restrictmoderate.youtube.com"
)

// GoogleDomains is Google's list of its search domains
// (https://www.google.com/supported_domains, without the leading dot), as
// reproduced from a published copy of that list: www.<each> is answered
// with forcesafesearch.google.com. Google changes the list now and then;
// a name missing here is simply not rewritten.
var GoogleDomains = []string{
	"google.com", "google.ad", "google.ae", "google.com.af", "google.com.ag", "google.com.ai", "google.al", "google.am",
	"google.co.ao", "google.com.ar", "google.as", "google.at", "google.com.au", "google.az", "google.ba", "google.com.bd",
	"google.be", "google.bf", "google.bg", "google.com.bh", "google.bi", "google.bj", "google.com.bn", "google.com.bo",
	"google.com.br", "google.bs", "google.bt", "google.co.bw", "google.by", "google.com.bz", "google.ca", "google.cd",
	"google.cf", "google.cg", "google.ch", "google.ci", "google.co.ck", "google.cl", "google.cm", "google.cn",
	"google.com.co", "google.co.cr", "google.com.cu", "google.cv", "google.com.cy", "google.cz", "google.de", "google.dj",
	"google.dk", "google.dm", "google.com.do", "google.dz", "google.com.ec", "google.ee", "google.com.eg", "google.es",
	"google.com.et", "google.fi", "google.com.fj", "google.fm", "google.fr", "google.ga", "google.ge", "google.gg",
	"google.com.gh", "google.com.gi", "google.gl", "google.gm", "google.gp", "google.gr", "google.com.gt", "google.gy",
	"google.com.hk", "google.hn", "google.hr", "google.ht", "google.hu", "google.co.id", "google.ie", "google.co.il",
	"google.im", "google.co.in", "google.iq", "google.is", "google.it", "google.je", "google.com.jm", "google.jo",
	"google.co.jp", "google.co.ke", "google.com.kh", "google.ki", "google.kg", "google.co.kr", "google.com.kw", "google.kz",
	"google.la", "google.com.lb", "google.li", "google.lk", "google.co.ls", "google.lt", "google.lu", "google.lv",
	"google.com.ly", "google.co.ma", "google.md", "google.me", "google.mg", "google.mk", "google.ml", "google.com.mm",
	"google.mn", "google.ms", "google.com.mt", "google.mu", "google.mv", "google.mw", "google.com.mx", "google.com.my",
	"google.co.mz", "google.com.na", "google.com.nf", "google.com.ng", "google.com.ni", "google.ne", "google.nl", "google.no",
	"google.com.np", "google.nr", "google.nu", "google.co.nz", "google.com.om", "google.com.pa", "google.com.pe", "google.com.pg",
	"google.com.ph", "google.com.pk", "google.pl", "google.pn", "google.com.pr", "google.ps", "google.pt", "google.com.py",
	"google.com.qa", "google.ro", "google.ru", "google.rw", "google.com.sa", "google.com.sb", "google.sc", "google.se",
	"google.com.sg", "google.sh", "google.si", "google.sk", "google.com.sl", "google.sn", "google.so", "google.sm",
	"google.sr", "google.st", "google.com.sv", "google.td", "google.tg", "google.co.th", "google.com.tj", "google.tk",
	"google.tl", "google.tm", "google.tn", "google.to", "google.com.tr", "google.tt", "google.com.tw", "google.co.tz",
	"google.com.ua", "google.co.ug", "google.co.uk", "google.com.uy", "google.co.uz", "google.com.vc", "google.co.ve", "google.vg",
	"google.co.vi", "google.com.vn", "google.vu", "google.ws", "google.rs", "google.co.za", "google.co.zm", "google.co.zw",
	"google.cat",
}

var (
	bingNames       = []string{"www.bing.com"}
	duckDuckGoNames = []string{"duckduckgo.com", "www.duckduckgo.com", "start.duckduckgo.com"}
	youTubeNames    = []string{"www.youtube.com", "m.youtube.com", "youtubei.googleapis.com",
		"youtube.googleapis.com", "www.youtube-nocookie.com"}
)

// safeName is a search engine's name under safe search.
type safeName struct {
	engine string
	target string
	rule   string
}

// safeNames maps each engine's name to its safe CNAME. Names match
// exactly, not their subdomains.
var safeNames = buildSafeNames()

func buildSafeNames() map[string]safeName {
	m := make(map[string]safeName, len(GoogleDomains)+16)
	add := func(engine, target string, names ...string) {
		for _, n := range names {
			m[n] = safeName{engine: engine, target: target, rule: "safe_search:" + engine}
		}
	}
	for _, d := range GoogleDomains {
		add(EngineGoogle, GoogleSafe, "www."+d)
	}
	add(EngineBing, BingSafe, bingNames...)
	add(EngineDuckDuckGo, DuckDuckGoSafe, duckDuckGoNames...)
	add(EngineYouTube, YouTubeStrict, youTubeNames...)
	return m
}
