package settings

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Bucket is the JetStream key-value bucket that carries every settings
// document from the orgmanager's deploy to every node.
// A value is a document's canonical JSON (Document.String), which Parse
// reads back.
const Bucket = "settings"

// GlobalKey is the key of the global layer's document.
const GlobalKey = "global"

// Keys must be valid KV keys for any organisation id and scope value, which
// may hold any text: both are written in unpadded base64url, one token
// each. An organisation's keys share the prefix "org.<org>." so that one
// subject filter (OrgKeyFilter) lists them all.
//
//	global                         the global layer
//	org.<org>.org                  the organisation's own document
//	org.<org>.profile.<N>          profile N
//	org.<org>.location.<value>     a location, username or device id
//	org.<org>.username.<value>
//	org.<org>.deviceid.<value>
var b64 = base64.RawURLEncoding

// Key returns the KV key of org's document for scope sc (sc valid).
func Key(org string, sc Scope) string {
	prefix := "org." + b64.EncodeToString([]byte(org)) + "."
	switch sc.Kind {
	case ScopeOrg:
		return prefix + LayerOrg
	case ScopeProfile:
		return prefix + LayerProfile + "." + strconv.Itoa(sc.Profile)
	}
	return prefix + sc.Kind.String() + "." + b64.EncodeToString([]byte(sc.Value))
}

// OrgKeyFilter is the KV subject filter matching every key of org.
func OrgKeyFilter(org string) string {
	return "org." + b64.EncodeToString([]byte(org)) + ".>"
}

// ParseKey is Key's inverse: the organisation and scope of a key, or
// global for GlobalKey. A key of another form is an error (a node skips its
// value).
func ParseKey(key string) (org string, sc Scope, global bool, err error) {
	if key == GlobalKey {
		return "", Scope{}, true, nil
	}
	parts := strings.Split(key, ".")
	if len(parts) < 3 || parts[0] != "org" {
		return "", Scope{}, false, fmt.Errorf("settings key %q is not global nor org.<org>.<scope>", key)
	}
	o, err := b64.DecodeString(parts[1])
	if err != nil || len(o) == 0 {
		return "", Scope{}, false, fmt.Errorf("settings key %q: bad organisation token", key)
	}
	org = string(o)
	switch {
	case len(parts) == 3 && parts[2] == LayerOrg:
		sc = Scope{Kind: ScopeOrg}
	case len(parts) == 4 && parts[2] == LayerProfile:
		n, err := strconv.Atoi(parts[3])
		if err != nil || strconv.Itoa(n) != parts[3] {
			return "", Scope{}, false, fmt.Errorf("settings key %q: bad profile number", key)
		}
		sc = Scope{Kind: ScopeProfile, Profile: n}
	case len(parts) == 4:
		kinds := map[string]ScopeKind{LayerLocation: ScopeLocation, LayerUsername: ScopeUsername, LayerDeviceID: ScopeDeviceID}
		k, ok := kinds[parts[2]]
		v, err := b64.DecodeString(parts[3])
		if !ok || err != nil {
			return "", Scope{}, false, fmt.Errorf("settings key %q: bad scope", key)
		}
		sc = Scope{Kind: k, Value: string(v)}
	default:
		return "", Scope{}, false, fmt.Errorf("settings key %q: bad scope", key)
	}
	if err := sc.Validate(); err != nil {
		return "", Scope{}, false, fmt.Errorf("settings key %q: %w", key, err)
	}
	if Key(org, sc) != key {
		return "", Scope{}, false, errors.New("settings key " + strconv.Quote(key) + " is not in canonical form")
	}
	return org, sc, false, nil
}
