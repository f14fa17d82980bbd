//go:build !unix

package feedbuild

import (
	"errors"
	"os"
)

func lockDir(string) (func(), error) {
	return nil, errors.New("feed build needs flock, which this system lacks: run it on Linux or another Unix")
}

func fileID(os.FileInfo) uint64 { return 0 }
