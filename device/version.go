package device

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNotAVersion is wrapped by [NormalizeVersion] for a string that is not
// a dotted version.
var ErrNotAVersion = errors.New("not a dotted version")

// NormalizeVersion turns a version as hardware and driver stacks print it
// into the semantic version that [Device.VersionAttribute] takes: one to
// three dot-separated decimal numbers with leading zeros dropped and
// missing minor and patch numbers as 0, so "580.95.05" becomes "580.95.5",
// "13.0" becomes "13.0.0" and "9" becomes "9.0.0". A pre-release or build
// suffix ("-rc.1", "+build") is kept. Anything else (more than three
// numbers, letters, empty parts) is an error wrapping [ErrNotAVersion]:
// the version is not guessed.
func NormalizeVersion(v string) (string, error) {
	core, suffix := v, ""
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		core, suffix = v[:i], v[i:]
	}
	parts := strings.Split(core, ".")
	if len(parts) > 3 {
		return "", fmt.Errorf("normalize version %q: %w: more than three numbers", v, ErrNotAVersion)
	}
	nums := []string{"0", "0", "0"}
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return "", fmt.Errorf("normalize version %q: %w: %q is not a decimal number", v, ErrNotAVersion, p)
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return "", fmt.Errorf("normalize version %q: %w: %v", v, ErrNotAVersion, err)
		}
		nums[i] = strconv.FormatUint(n, 10)
	}
	out := strings.Join(nums, ".") + suffix
	if len(out) > MaxStringLength || !semverRE.MatchString(out) {
		return "", fmt.Errorf("normalize version %q: %w: %q is not a semantic version", v, ErrNotAVersion, out)
	}
	return out, nil
}
