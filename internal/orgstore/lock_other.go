//go:build !unix

package orgstore

import "os"

// lockExclusive is not available here: the read cache stays off.
func lockExclusive(string) *os.File { return nil }
