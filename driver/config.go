package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ConfigType is one kind of a driver's opaque configuration: its
// apiVersion and kind, the Go type its parameters decode into, and the
// checks a decoded value must pass. Make one with [NewConfigType] and
// register it in the driver's [ConfigScheme].
type ConfigType struct {
	apiVersion, kind string
	typeName         string
	newValue         func() any
	validate         func(any) error
}

// NewConfigType describes configurations of apiVersion and kind that
// decode into a T. T must have fields for "apiVersion" and "kind" (e.g.
// an embedded metav1.TypeMeta): decoding is strict, a field T does not
// have is an error. Both empty describe a driver whose configurations
// carry no type fields; such a type must be the only one of its scheme.
//
// validate, when not nil, checks a decoded value (after the configs
// that apply to a device were merged, see [ConfigScheme.Decode]) and
// returns an error that says what is wrong, e.g.
// `sharing.interval "Huge": want Short, Medium or Long`. It runs at
// prepare and at admission (package admission), where the device is not
// known yet: checks that need the device belong in the Preparer, after
// Decode.
func NewConfigType[T any](apiVersion, kind string, validate func(*T) error) ConfigType {
	t := ConfigType{apiVersion: apiVersion, kind: kind, typeName: fmt.Sprintf("%T", *new(T)), newValue: func() any { return new(T) }}
	if validate != nil {
		t.validate = func(v any) error { return validate(v.(*T)) }
	}
	return t
}

// APIVersion is the apiVersion of the configurations of this type.
func (t ConfigType) APIVersion() string { return t.apiVersion }

// Kind is the kind of the configurations of this type.
func (t ConfigType) Kind() string { return t.kind }

// String is "kind (apiVersion)", or "config" for an untyped one.
func (t ConfigType) String() string {
	if t.kind == "" {
		return "config"
	}
	return t.kind + " (" + t.apiVersion + ")"
}

// ConfigScheme is a driver's opaque configuration types, registered once:
// the one decoder that prepare ([ConfigScheme.Decode], called by the
// vendor's Preparer) and admission (package admission, a webhook that
// refuses a bad claim at `kubectl apply`) share, so that a claim is
// refused at admission with the message its prepare would give. It is
// safe for concurrent use.
type ConfigScheme struct {
	driver string
	types  []ConfigType
}

// ErrBadConfigScheme is wrapped by [NewConfigScheme]'s errors.
var ErrBadConfigScheme = errors.New("bad configuration scheme")

// NewConfigScheme returns the scheme of driverName's configuration types.
// It refuses no types, a type twice, a type with only one of apiVersion
// and kind, an untyped type beside others, and a T without apiVersion
// and kind fields.
func NewConfigScheme(driverName string, types ...ConfigType) (*ConfigScheme, error) {
	bad := func(format string, args ...any) (*ConfigScheme, error) {
		return nil, fmt.Errorf("%w: driver %s: %s", ErrBadConfigScheme, driverName, fmt.Sprintf(format, args...))
	}
	if driverName == "" {
		return bad("empty driver name")
	}
	if len(types) == 0 {
		return bad("no configuration types")
	}
	seen := map[[2]string]bool{}
	for _, t := range types {
		switch {
		case t.newValue == nil:
			return bad("a ConfigType not made by NewConfigType")
		case (t.apiVersion == "") != (t.kind == ""):
			return bad("type %s: apiVersion %q, kind %q: set both or neither", t.typeName, t.apiVersion, t.kind)
		case t.kind == "" && len(types) > 1:
			return bad("type %s has no apiVersion and kind: it must be the only type", t.typeName)
		case seen[[2]string{t.apiVersion, t.kind}]:
			return bad("%s registered twice", t)
		}
		seen[[2]string{t.apiVersion, t.kind}] = true
		if t.kind != "" {
			probe := fmt.Sprintf(`{"apiVersion":%q,"kind":%q}`, t.apiVersion, t.kind)
			if err := decodeStrict(json.RawMessage(probe), t.newValue()); err != nil {
				return bad("type %s cannot hold apiVersion and kind (%v): give it those fields, e.g. an embedded metav1.TypeMeta", t.typeName, err)
			}
		}
	}
	return &ConfigScheme{driver: driverName, types: append([]ConfigType(nil), types...)}, nil
}

// Driver is the driver whose configurations the scheme decodes: an
// opaque configuration for another driver is not the scheme's.
func (s *ConfigScheme) Driver() string { return s.driver }

// Types are the registered types, in registration order.
func (s *ConfigScheme) Types() []ConfigType { return append([]ConfigType(nil), s.types...) }

// Decode decodes the configurations that apply to dev (dev.Config:
// class configs first, then the claim's) and checks the result. Configs
// of one type are merged in that order, each overriding the fields it
// sets; a config of another type replaces what came before. The result
// is a *T of the registered type of the last config, nil when no config
// applies. Unknown fields, an unknown apiVersion or kind and a failed
// check are a [*ConfigError], which wraps [ErrInvalidConfig].
func (s *ConfigScheme) Decode(dev AllocatedDevice) (any, error) {
	var cur any
	var curType *ConfigType
	for _, c := range dev.Config {
		src := "claim"
		if c.FromClass {
			src = "class"
		}
		t, err := s.typeOf(c.Parameters)
		if err != nil {
			return nil, &ConfigError{Request: dev.Request, Source: src, Err: err}
		}
		if curType != t {
			cur, curType = t.newValue(), t
		}
		if err := decodeStrict(c.Parameters, cur); err != nil {
			return nil, &ConfigError{Request: dev.Request, Source: src, Type: t.String(), Err: err}
		}
	}
	if curType != nil && curType.validate != nil {
		if err := curType.validate(cur); err != nil {
			return nil, &ConfigError{Request: dev.Request, Type: curType.String(), Err: err}
		}
	}
	return cur, nil
}

// DecodeAs is [ConfigScheme.Decode] for a driver that expects type T: a
// config of another registered type is an error. A nil result means that
// no config applies.
func DecodeAs[T any](s *ConfigScheme, dev AllocatedDevice) (*T, error) {
	v, err := s.Decode(dev)
	if err != nil || v == nil {
		return nil, err
	}
	t, ok := v.(*T)
	if !ok {
		return nil, &ConfigError{Request: dev.Request, Err: fmt.Errorf("a %T configuration, where the driver expects a %T", v, new(T))}
	}
	return t, nil
}

// typeOf is the registered type of a configuration's parameters, by
// their apiVersion and kind.
func (s *ConfigScheme) typeOf(raw json.RawMessage) (*ConfigType, error) {
	if len(s.types) == 1 && s.types[0].kind == "" {
		return &s.types[0], nil
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, err
	}
	for i, t := range s.types {
		if t.apiVersion == tm.APIVersion && t.kind == tm.Kind {
			return &s.types[i], nil
		}
	}
	known := make([]string, len(s.types))
	for i, t := range s.types {
		known[i] = t.apiVersion + " " + t.kind
	}
	return nil, fmt.Errorf("apiVersion %q, kind %q: not a configuration of driver %s, which takes %s", tm.APIVersion, tm.Kind, s.driver, strings.Join(known, ", "))
}

// ConfigError is an opaque configuration that cannot be decoded or
// fails its type's check. It wraps [ErrInvalidConfig] and Err. Its
// message is the same at prepare and at admission for the same claim
// and request.
type ConfigError struct {
	// Request is the request the configuration applies to, as allocated
	// ("request/subrequest" for a firstAvailable alternative).
	Request string
	// Source is "claim" or "class" for one configuration that does not
	// decode; empty for a check of the merged result.
	Source string
	// Type is the configuration's type ([ConfigType.String]); empty when
	// it is not known.
	Type string
	// Err says what is wrong.
	Err error
}

// Error is `invalid opaque device configuration: request "r": <what>:
// <Err>`, what being e.g. "GpuConfig (example.com/v1) from the claim".
func (e *ConfigError) Error() string {
	what := e.Type
	if what == "" {
		what = "config"
	}
	if e.Source != "" {
		what += " from the " + e.Source
	}
	return fmt.Sprintf("%v: request %q: %s: %v", ErrInvalidConfig, e.Request, what, e.Err)
}

// Unwrap returns [ErrInvalidConfig] and Err.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

// decodeStrict decodes raw into into, refusing unknown fields: the one
// decoder of opaque configuration, for [DecodeConfig] and
// [ConfigScheme.Decode].
func decodeStrict(raw json.RawMessage, into any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}
