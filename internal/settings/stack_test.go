package settings

import (
	"slices"
	"testing"
)

func mustParse(t testing.TB, s string) *Document {
	t.Helper()
	d, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return d
}

func layerNames(ls []Layer) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

func TestStack(t *testing.T) {
	doc := func(s string) *Document { return mustParse(t, s) }
	global := Layer{LayerGlobal, doc(`{"safe_search":true}`)}
	org := Layer{"org:acme", doc(`{"profile":1}`)}
	profiles := map[int]Layer{
		1: {"profile:1", doc(`{"paused":true,"profile":2}`)}, // its own profile field chooses nothing
		2: {"profile:2", doc(`{"paused":false}`)},
	}
	loc := Layer{"location:hq", doc(`{"profile":2}`)}
	user := Layer{"username:alice", doc(`{"blocklist":["a.example"]}`)}
	dev := Layer{"deviceid:mac:01", doc(`{"profile":1}`)}

	for _, c := range []struct {
		name        string
		stack       Stack
		explicit    int
		hasExplicit bool
		layers      []string
		profile     int
		selected    bool
	}{
		{"nothing", Stack{}, 0, false, []string{}, 0, false},
		{"global alone (no session)", Stack{Global: global}, 0, false, []string{"global"}, 0, false},
		{"org selects 1", Stack{Global: global, Org: org, Profiles: profiles}, 0, false,
			[]string{"global", "org:acme", "profile:1"}, 1, true},
		{"location more specific selects 2", Stack{Global: global, Org: org, Profiles: profiles, Location: loc, Username: user}, 0, false,
			[]string{"global", "org:acme", "profile:2", "location:hq", "username:alice"}, 2, true},
		{"device selects 1 again", Stack{Global: global, Org: org, Profiles: profiles, Location: loc, Username: user, DeviceID: dev}, 0, false,
			[]string{"global", "org:acme", "profile:1", "location:hq", "username:alice", "deviceid:mac:01"}, 1, true},
		{"explicit wins", Stack{Global: global, Org: org, Profiles: profiles, Location: loc}, 1, true,
			[]string{"global", "org:acme", "profile:1", "location:hq"}, 1, true},
		{"explicit profile without a document", Stack{Global: global, Org: org, Profiles: profiles}, 7, true,
			[]string{"global", "org:acme"}, 7, true},
		{"explicit 0 is a choice", Stack{Org: org, Profiles: map[int]Layer{0: {"profile:0", doc(`{}`)}}}, 0, true,
			[]string{"org:acme", "profile:0"}, 0, true},
		{"global selects", Stack{Global: Layer{LayerGlobal, doc(`{"profile":2}`)}, Profiles: profiles}, 0, false,
			[]string{"global", "profile:2"}, 2, true},
		{"layers without documents are left out", Stack{Global: global, Org: Layer{Name: "org:acme"}, Username: Layer{Name: "username:bob"}}, 0, false,
			[]string{"global"}, 0, false},
		{"no profiles map", Stack{Org: org}, 0, false, []string{"org:acme"}, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.stack.AppendLayers(nil, c.explicit, c.hasExplicit)
			if names := layerNames(got); !slices.Equal(names, c.layers) {
				t.Errorf("layers %v, want %v", names, c.layers)
			}
			n, ok := c.stack.Profile(c.explicit, c.hasExplicit)
			if n != c.profile || ok != c.selected {
				t.Errorf("Profile = %d %v, want %d %v", n, ok, c.profile, c.selected)
			}
			if len(got) > MaxLayers {
				t.Errorf("%d layers, more than MaxLayers", len(got))
			}
		})
	}

	// The profile document of the choice is merged: device → profile 1 →
	// paused true, from "profile:1".
	s := Stack{Global: global, Org: org, Profiles: profiles, Location: loc, DeviceID: dev}
	e := Merge(s.AppendLayers(nil, 0, false)...)
	if *e.Paused != true || e.Origin["paused"] != "profile:1" || e.Origin["safe_search"] != LayerGlobal || e.Origin["profile"] != "deviceid:mac:01" {
		t.Errorf("merge: paused %v origins %v", *e.Paused, e.Origin)
	}

	// Appending keeps what dst holds and does not allocate with room.
	buf := make([]Layer, 1, 1+MaxLayers)
	if n := testing.AllocsPerRun(100, func() { _ = s.AppendLayers(buf[:1], 0, false) }); n != 0 {
		t.Errorf("AppendLayers allocates %v times", n)
	}
	if got := s.AppendLayers(buf[:1], 0, false); len(got) != 6 || &got[0] != &buf[0] {
		t.Errorf("AppendLayers did not append to dst: %d layers", len(got))
	}
}
