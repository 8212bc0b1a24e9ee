package device

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// KubernetesDomain is the domain of the standard attributes
// ("resource.kubernetes.io/pcieRoot").
const KubernetesDomain = "resource.kubernetes.io"

// QualifiedName joins a domain and an identifier into an attribute or
// capacity name ("gpu.example.com/model"). An empty domain gives the bare
// identifier, which belongs to the driver's own domain.
func QualifiedName(domain, id string) string {
	if domain == "" {
		return id
	}
	return domain + "/" + id
}

// SplitQualifiedName splits "domain/id" into its parts; a bare name has
// an empty domain.
func SplitQualifiedName(name string) (domain, id string) {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return name[:i], name[i+1:]
	}
	return "", name
}

// SanitizeName turns any string (a PCI address "0000:3b:00.0", a serial
// number, a UUID in upper case) into a DNS label usable as a device,
// counter or counter set name. A string that already is a DNS label is
// returned unchanged. Any other string is lower-cased, each run of
// characters other than [a-z0-9] becomes one '-', and a '-' plus the first
// 8 hex digits of the SHA-256 of the original string are appended, so
// that different inputs ("GPU_0" and "gpu-0") give different names; the
// result is at most 63 characters. The empty string gives "x-" plus the
// hash.
func SanitizeName(s string) string {
	if len(validation.IsDNS1123Label(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	suffix := hex.EncodeToString(sum[:4])
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	base := strings.Trim(b.String(), "-")
	const maxBase = validation.DNS1123LabelMaxLength - 1 - 8
	if len(base) > maxBase {
		base = strings.TrimRight(base[:maxBase], "-")
	}
	if base == "" {
		base = "x"
	}
	return base + "-" + suffix
}

// HealthTaintKey returns the key of the taint that marks an unhealthy
// device of driver: "<driver>/unhealthy".
func HealthTaintKey(driver string) string { return driver + "/unhealthy" }

// HealthTaint returns the taint for a health report: for [Unhealthy] a
// taint with key [HealthTaintKey], the given effect, and the report's
// Reason as value when it is a valid label value (else empty); for other
// health values ok is false.
func HealthTaint(driver string, r HealthReport, effect TaintEffect) (t Taint, ok bool) {
	if r.Health != Unhealthy {
		return Taint{}, false
	}
	t = Taint{Key: HealthTaintKey(driver), Effect: effect}
	if len(validation.IsValidLabelValue(r.Reason)) == 0 {
		t.Value = r.Reason
	}
	if !r.Time.IsZero() {
		tm := r.Time
		t.TimeAdded = &tm
	}
	return t, true
}
