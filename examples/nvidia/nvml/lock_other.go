//go:build !unix

package nvml

import "errors"

// lockFile needs flock; the simulator's state file and the intent journal
// are for Linux nodes.
func lockFile(path string, exclusive bool) (func(), error) {
	return nil, errors.New("lock " + path + ": file locking needs a unix system")
}
