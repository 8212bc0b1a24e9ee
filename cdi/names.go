package cdi

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// MaxDeviceLocalName is the most bytes of a [Device] name.
const MaxDeviceLocalName = 128

// MaxUIDLength is the most characters of a claim UID.
const MaxUIDLength = 64

// ErrInvalidName is wrapped by every error about a bad vendor, class,
// claim UID or device name.
var ErrInvalidName = errors.New("invalid name")

// EncodeName encodes any string into characters allowed in a CDI device
// name, reversibly, so that different strings give different results:
// ASCII letters and digits, '-', '.' and ':' stay (except that a '-',
// '.' or ':' first or last is escaped), and every other byte b, '_'
// included, becomes "_" plus two lowercase hex digits. The result is
// never empty for a non-empty input, holds only characters that CDI
// allows inside a device name, ends with a letter or digit, and
// [DecodeName] inverts it.
func EncodeName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		keep := isAlnum(c) || ((c == '-' || c == '.' || c == ':') && i > 0 && i < len(s)-1)
		if keep {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02x", c)
	}
	return b.String()
}

// DecodeName inverts [EncodeName]. It fails on a string that EncodeName
// cannot have produced.
func DecodeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("decode name %q: truncated escape: %w", s, ErrInvalidName)
		}
		var v byte
		for _, h := range s[i+1 : i+3] {
			switch {
			case h >= '0' && h <= '9':
				v = v<<4 | byte(h-'0')
			case h >= 'a' && h <= 'f':
				v = v<<4 | byte(h-'a'+10)
			default:
				return "", fmt.Errorf("decode name %q: bad escape: %w", s, ErrInvalidName)
			}
		}
		b.WriteByte(v)
		i += 2
	}
	out := b.String()
	if EncodeName(out) != s {
		return "", fmt.Errorf("decode name %q: not in canonical form: %w", s, ErrInvalidName)
	}
	return out, nil
}

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func isLetter(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// ValidateUID checks a claim UID: 1 to [MaxUIDLength] ASCII letters,
// digits or '-', starting and ending with a letter or digit.
func ValidateUID(uid types.UID) error {
	s := string(uid)
	if s == "" {
		return fmt.Errorf("claim UID: must not be empty: %w", ErrInvalidName)
	}
	if len(s) > MaxUIDLength {
		return fmt.Errorf("claim UID %.20q...: longer than %d characters: %w", s, MaxUIDLength, ErrInvalidName)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' {
			return fmt.Errorf("claim UID %q: character %q at %d is not a letter, digit or '-': %w", s, c, i, ErrInvalidName)
		}
	}
	if !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return fmt.Errorf("claim UID %q: must start and end with a letter or digit: %w", s, ErrInvalidName)
	}
	return nil
}

// ParseKind splits a CDI kind "<vendor>/<class>" ("acme.example.com/fpga")
// into its parts and checks both by the CDI rules (see [NewWriter]). The
// error wraps [ErrInvalidName].
func ParseKind(kind string) (vendor, class string, err error) {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok {
		return "", "", fmt.Errorf("CDI kind %q: must be <vendor>/<class>: %w", kind, ErrInvalidName)
	}
	if err := validateKindPart("vendor", vendor); err != nil {
		return "", "", fmt.Errorf("CDI kind %q: %w", kind, err)
	}
	if err := validateKindPart("class", class); err != nil {
		return "", "", fmt.Errorf("CDI kind %q: %w", kind, err)
	}
	return vendor, class, nil
}

// validateKindPart checks a vendor or class name by the CDI rules; what
// names the field.
func validateKindPart(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s: must not be empty: %w", what, ErrInvalidName)
	}
	if len(s) > 253 {
		return fmt.Errorf("%s %.20q...: longer than 253 characters: %w", what, s, ErrInvalidName)
	}
	if !isLetter(s[0]) {
		return fmt.Errorf("%s %q: must start with a letter: %w", what, s, ErrInvalidName)
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '_' && c != '-' && c != '.' {
			return fmt.Errorf("%s %q: character %q at %d is not a letter, digit, '_', '-' or '.': %w", what, s, c, i, ErrInvalidName)
		}
	}
	if !isAlnum(s[len(s)-1]) {
		return fmt.Errorf("%s %q: must end with a letter or digit: %w", what, s, ErrInvalidName)
	}
	return nil
}

// validateLocalName checks a Device name.
func validateLocalName(name string) error {
	if name == "" {
		return fmt.Errorf("device name: must not be empty: %w", ErrInvalidName)
	}
	if len(name) > MaxDeviceLocalName {
		return fmt.Errorf("device name %.20q...: longer than %d bytes: %w", name, MaxDeviceLocalName, ErrInvalidName)
	}
	return nil
}

// deviceName builds "<uid>_<EncodeName(device)>". The UID has no '_', so
// the first '_' separates the parts and the pair is recoverable.
func deviceName(claimUID types.UID, device string) (string, error) {
	if err := ValidateUID(claimUID); err != nil {
		return "", fmt.Errorf("build CDI device name: %w", err)
	}
	if err := validateLocalName(device); err != nil {
		return "", fmt.Errorf("build CDI device name: %w", err)
	}
	return string(claimUID) + "_" + EncodeName(device), nil
}
