package settings

import (
	"fmt"
	"strconv"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// ScopeKind is the layer of an organisation's settings document
// (docs/policy.md, the layers); the global layer is outside every
// organisation and has methods of its own. The values are the layers' order
// and the database's scope codes.
type ScopeKind uint8

// Scope kinds, least specific first.
const (
	ScopeOrg ScopeKind = iota + 1
	ScopeProfile
	ScopeLocation
	ScopeUsername
	ScopeDeviceID
)

// String returns the kind's layer name (LayerOrg, …).
func (k ScopeKind) String() string {
	switch k {
	case ScopeOrg:
		return LayerOrg
	case ScopeProfile:
		return LayerProfile
	case ScopeLocation:
		return LayerLocation
	case ScopeUsername:
		return LayerUsername
	case ScopeDeviceID:
		return LayerDeviceID
	}
	return "scope(" + strconv.Itoa(int(k)) + ")"
}

// Scope says which document of an organisation: its own (ScopeOrg), that of
// profile number Profile, or that of the location, username or device id
// Value (deviceid in the "prefix:value" form overrides carry).
type Scope struct {
	Kind ScopeKind
	// Value is the location, username or device id; "" for the other kinds.
	Value string
	// Profile is the profile number of ScopeProfile (0..MaxProfile);
	// 0 for the other kinds.
	Profile int
}

// Validate checks the scope: a location, username or device id follows the
// rule of an override's attribute (identity.Attributes.Validate) and is not
// empty; a profile number is within 0..MaxProfile. A refusal wraps
// identity.ErrInvalid and its text is fit for an API client.
func (sc Scope) Validate() error {
	switch sc.Kind {
	case ScopeOrg, ScopeProfile:
		if sc.Value != "" {
			return fmt.Errorf("%w: a %s scope has no value", identity.ErrInvalid, sc.Kind)
		}
		if sc.Kind == ScopeOrg && sc.Profile != 0 {
			return fmt.Errorf("%w: an org scope has no profile number", identity.ErrInvalid)
		}
		if sc.Profile < 0 || sc.Profile > MaxProfile {
			return fmt.Errorf("%w: profile must be a whole number from 0 to %d", identity.ErrInvalid, MaxProfile)
		}
		return nil
	case ScopeLocation, ScopeUsername, ScopeDeviceID:
		if sc.Profile != 0 {
			return fmt.Errorf("%w: a %s scope has no profile number", identity.ErrInvalid, sc.Kind)
		}
		if sc.Value == "" {
			return fmt.Errorf("%w: %s is empty", identity.ErrInvalid, sc.Kind)
		}
		var a identity.Attributes
		switch sc.Kind {
		case ScopeLocation:
			a.Location = sc.Value
		case ScopeUsername:
			a.Username = sc.Value
		default:
			a.DeviceID = sc.Value
		}
		return a.Validate()
	}
	return fmt.Errorf("%w: unknown settings scope %d", identity.ErrInvalid, sc.Kind)
}

// Layer returns the scope's layer name as settings.Merge reports origins:
// "org:acme", "profile:2", "location:hq", "username:alice",
// "deviceid:mac:0a1b".
func (sc Scope) Layer(org string) string {
	switch sc.Kind {
	case ScopeOrg:
		return sc.Kind.String() + ":" + org
	case ScopeProfile:
		return sc.Kind.String() + ":" + strconv.Itoa(sc.Profile)
	}
	return sc.Kind.String() + ":" + sc.Value
}
