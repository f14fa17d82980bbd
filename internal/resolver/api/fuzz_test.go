package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// FuzzAPI feeds arbitrary server ids, statistic names and keys to the
// statistics and server endpoints, raw and escaped: the answer is never a
// 500 or a panic, and is always one of the documented statuses with a
// JSON body.
func FuzzAPI(f *testing.F) {
	for _, seed := range [][3]string{
		{"localhost", "uptime", testKey},
		{"localhost", "", testKey},
		{"localhost", "uptimeAAAA", testKey},
		{"other", "questions", testKey},
		{"localhost", "qa-latency", ""},
		{"..", "%zz", "\x00"},
		{"local%2Fhost", "a&statistic=b", "changeme-key\r\nX: y"},
		{"localhost/statistics", "uptime;x=1", "ünïcode"},
		{"", "\xff\xfe", " " + testKey},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	s := startDefault(f)
	allowed := map[int]bool{200: true, 401: true, 404: true, 405: true, 422: true}
	f.Fuzz(func(t *testing.T, serverID, statistic, key string) {
		check := func(req *http.Request) {
			req.Header["X-Api-Key"] = []string{key}
			rec := httptest.NewRecorder()
			s.handler.ServeHTTP(rec, req)
			if !allowed[rec.Code] {
				t.Fatalf("%s %q: status %d: %s", req.Method, req.URL.String(), rec.Code, rec.Body)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%q: %d body is not JSON: %q", req.URL.String(), rec.Code, rec.Body)
			}
		}
		// Escaped, as a client would send them.
		for _, path := range []string{
			"/api/v1/servers/" + url.PathEscape(serverID) + "/statistics?statistic=" + url.QueryEscape(statistic),
			"/api/v1/servers/" + url.PathEscape(serverID),
			"/api/v1/servers/localhost/statistics?statistic=" + url.QueryEscape(statistic) + "&api-key=" + url.QueryEscape(key),
		} {
			check(httptest.NewRequest(http.MethodGet, path, nil))
		}
		// Raw, as a broken client or an attacker might.
		check(&http.Request{
			Method: http.MethodGet,
			URL:    &url.URL{Path: "/api/v1/servers/" + serverID + "/statistics", RawQuery: "statistic=" + statistic},
			Header: http.Header{},
			Host:   "x",
		})
	})
}
