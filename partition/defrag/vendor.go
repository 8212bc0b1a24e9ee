package defrag

import (
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
)

// Vendor is what the controller needs to know of a vendor's partitionable
// cards; the vendor's layer fills it in once (package mig/defrag for
// NVIDIA MIG). Everything else comes from each card's partition.Scheme:
// device names (Scheme.ParseDeviceName), units, placements, the counter
// model and the attributes of its devices.
type Vendor struct {
	// Domain is the DNS subdomain of the controller's names in the
	// cluster: the pods' opt-in annotation and the taint key
	// Domain+"/defrag", the label and annotation of an operation's
	// DeviceTaintRules Domain+"/defrag-operation", the Events' component
	// Domain+"/defrag"; the rules are named "<Domain's first
	// label>-defrag-<operation>-<n>". Required. Clusters and admission
	// policies rely on these names: a vendor keeps its Domain.
	Domain string
	// Scheme returns the scheme of the card model that a device names in
	// its ModelAttribute (and a layout ledger's card in its Scheme).
	// Required; an error leaves the device's card out of every plan.
	Scheme func(model string) (*partition.Scheme, error)
	// ModelAttribute is the device attribute, plain or in the driver's
	// domain, that names its card's model; "model" when empty.
	ModelAttribute string
	// Profiles are the profiles a driver advertises on a card of scheme
	// s; the controller adds those published on the node. When nil,
	// counter.DefaultProfiles.
	Profiles func(s *partition.Scheme) []string
	// Card is the noun of one card in Events and logs; "card" when empty.
	Card string
}

// names are a Vendor's names in the cluster.
type names struct {
	optIn, taint, operation, component, rulePrefix, card, model string

	scheme   func(string) (*partition.Scheme, error)
	profiles func(*partition.Scheme) []string
}

// names checks v and derives its names.
func (v Vendor) names() (names, error) {
	if errs := validation.IsDNS1123Subdomain(v.Domain); len(errs) > 0 {
		return names{}, fmt.Errorf("vendor domain %q: %s", v.Domain, strings.Join(errs, "; "))
	}
	if v.Scheme == nil {
		return names{}, errors.New("vendor: Scheme is nil")
	}
	n := names{optIn: v.Domain + "/defrag", taint: v.Domain + "/defrag",
		operation: v.Domain + "/defrag-operation", component: v.Domain + "/defrag",
		rulePrefix: strings.SplitN(v.Domain, ".", 2)[0] + "-defrag-",
		card:       v.Card, model: v.ModelAttribute, scheme: v.Scheme, profiles: v.Profiles}
	if n.card == "" {
		n.card = "card"
	}
	if n.model == "" {
		n.model = "model"
	}
	if n.profiles == nil {
		n.profiles = counter.DefaultProfiles
	}
	return n, nil
}

// schemeOf reads a device's model attribute (plain or in the driver's
// domain) and returns its scheme, nil when it has none the vendor knows.
// models caches the vendor's answers (nil for a model it does not know)
// for one Step: a node's devices repeat a few models.
func (c *Controller) schemeOf(
	models map[string]*partition.Scheme,
	d *resourceapi.Device,
) *partition.Scheme {
	for _, k := range []resourceapi.QualifiedName{resourceapi.QualifiedName(c.n.model),
		resourceapi.QualifiedName(c.driver + "/" + c.n.model)} {
		a, ok := d.Attributes[k]
		if !ok || a.StringValue == nil {
			continue
		}
		s, seen := models[*a.StringValue]
		if !seen {
			if s, _ = c.n.scheme(*a.StringValue); s != nil && s.Validate(nil) != nil {
				s = nil // not built by partition.NewScheme
			}
			models[*a.StringValue] = s
		}
		if s != nil {
			return s
		}
	}
	return nil
}
