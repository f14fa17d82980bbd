package dnssec

import (
	"fmt"

	"github.com/miekg/dns"
)

// State is a validation outcome (RFC 4035 section 4.3).
type State uint8

const (
	// Indeterminate: no trust anchor covers the name, so nothing can be
	// said (the zero value).
	Indeterminate State = iota
	// Secure: a chain of signatures from a trust anchor proves the data.
	Secure
	// Insecure: a chain of signatures proves that the data's zone is
	// unsigned (no DS at its cut, or a negative trust anchor).
	Insecure
	// Bogus: the data should be signed and the signatures do not hold.
	Bogus
)

func (s State) String() string {
	switch s {
	case Secure:
		return "secure"
	case Insecure:
		return "insecure"
	case Bogus:
		return "bogus"
	}
	return "indeterminate"
}

// Result is a validation outcome and, when bogus, why: an RFC 8914 extended
// error code and a text for the log.
type Result struct {
	State  State
	EDE    uint16
	Reason string
	// NTA: insecure because a negative trust anchor covers the name.
	NTA bool
}

// Ok is the secure result.
var ok = Result{State: Secure}

func bogus(code uint16, format string, a ...any) Result {
	return Result{State: Bogus, EDE: code, Reason: fmt.Sprintf(format, a...)}
}

func insecure(format string, a ...any) Result {
	return Result{State: Insecure, Reason: fmt.Sprintf(format, a...)}
}

// Error makes a bogus result usable as an error.
func (r Result) Error() string {
	name := dns.ExtendedErrorCodeToString[r.EDE]
	if name == "" {
		name = fmt.Sprintf("EDE %d", r.EDE)
	}
	return fmt.Sprintf("dnssec %s (%s): %s", r.State, name, r.Reason)
}
