package conformance

import (
	"path/filepath"
	"strings"
)

// PathMapping translates a path prefix a driver reports (as it sees its
// own file system) into the path where the suite finds the same file.
type PathMapping struct {
	// From is the prefix as the driver sees it, e.g. "/var/lib/kubelet".
	From string
	// To replaces From, e.g. "/tmp/node1/kubelet".
	To string
}

// translate applies the first mapping whose From is a path prefix of p.
func translate(p string, maps []PathMapping) string {
	for _, m := range maps {
		from := filepath.Clean(m.From)
		if p == from {
			return filepath.Clean(m.To)
		}
		if from == "/" && strings.HasPrefix(p, "/") {
			return filepath.Join(m.To, p)
		}
		if strings.HasPrefix(p, from+"/") {
			return filepath.Join(m.To, strings.TrimPrefix(p, from+"/"))
		}
	}
	return p
}
