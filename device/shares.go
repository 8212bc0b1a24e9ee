package device

import (
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ErrInvalidShares is wrapped by [NewShares]'s errors.
var ErrInvalidShares = errors.New("invalid shares")

// ShareCapacity is one consumable capacity of a shareable device and what
// one allocation (a share) may take of it. Give Default and one of two
// forms: a range (Min, and optionally Step and Max) or a list (Values).
// Every quantity is a whole number of the capacity's unit (bytes,
// percent points).
type ShareCapacity struct {
	// Name is the capacity's qualified name ("memory"; see
	// [Device.StringAttribute]).
	Name string
	// Capacity is the device's total; the scheduler keeps the sum of the
	// shares within it.
	Capacity resource.Quantity
	// Default is what a share takes when its request names no amount of
	// this capacity (and what a claim of the old style, an extended
	// resource, gets).
	Default resource.Quantity
	// Min selects the range form: a share takes at least Min. A request
	// above Min is rounded up to Min plus a multiple of Step (any amount
	// without Step), and one above Max (Capacity when nil) cannot be
	// allocated. Max and Default must be Min plus a multiple of Step.
	Min, Step, Max *resource.Quantity
	// Values selects the list form: a share takes one of them, a request
	// rounded up to the next (at most 10, ascending, Default among them).
	Values []resource.Quantity
}

// Shares is the consumable-capacity model of a shareable device
// (KEP-5075), the way package partition's counter model is the
// partitionable one: [Shares.Apply] makes a device shareable with the
// capacities and request policies, and [Shares.Of] reads what one
// allocation took. Build it with [NewShares]; it is immutable and safe
// for concurrent use.
//
// Every capacity of a shareable device needs a policy: the scheduler
// charges a capacity without one in full to each allocation, so the
// first share would take the device whole. Apply the model after the
// device's own capacities so that it replaces same-named ones.
type Shares struct {
	caps     []ShareCapacity
	policies []*RequestPolicy
}

// NewShares checks the capacities against the API server's rules for
// request policies (the same checks as [Validate]) and returns their
// model. An error wraps [ErrInvalidShares] and names the capacity and
// the rule.
func NewShares(capacities ...ShareCapacity) (*Shares, error) {
	if len(capacities) == 0 {
		return nil, fmt.Errorf("%w: no capacity", ErrInvalidShares)
	}
	s := &Shares{}
	var errs []error
	seen := map[string]bool{}
	for i, c := range capacities {
		p, err := c.policy()
		if err == nil && seen[c.Name] {
			err = errors.New("capacity named twice")
		}
		if err == nil {
			err = c.check(p)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("capacity #%d %q: %w", i, c.Name, err))
			continue
		}
		seen[c.Name] = true
		s.caps = append(s.caps, c.clone())
		s.policies = append(s.policies, p)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidShares, errors.Join(errs...))
	}
	return s, nil
}

func (c ShareCapacity) clone() ShareCapacity {
	cp := func(q *resource.Quantity) *resource.Quantity {
		if q == nil {
			return nil
		}
		v := q.DeepCopy()
		return &v
	}
	out := c
	out.Capacity, out.Default = c.Capacity.DeepCopy(), c.Default.DeepCopy()
	out.Min, out.Step, out.Max = cp(c.Min), cp(c.Step), cp(c.Max)
	out.Values = nil
	for _, v := range c.Values {
		out.Values = append(out.Values, v.DeepCopy())
	}
	return out
}

// policy is the capacity's request policy, or why it has none.
func (c ShareCapacity) policy() (*RequestPolicy, error) {
	switch {
	case c.Name == "":
		return nil, errors.New("name is empty")
	case c.Min != nil && len(c.Values) > 0:
		return nil, errors.New("both a range (Min) and Values: give one form")
	case c.Min == nil && (c.Step != nil || c.Max != nil):
		return nil, errors.New("Step or Max without Min")
	case c.Min == nil && len(c.Values) == 0:
		return nil, errors.New("neither a range (Min) nor Values: give one form")
	}
	for _, q := range append([]*resource.Quantity{&c.Capacity, &c.Default, c.Min, c.Step, c.Max},
		ptrs(c.Values)...) {
		if q != nil && (q.Sign() < 0 || isFractional(*q)) {
			return nil, fmt.Errorf("%s is not a whole non-negative amount", q)
		}
	}
	if c.Step != nil && c.Step.Sign() == 0 {
		return nil, errors.New("Step is zero")
	}
	def := c.Default.DeepCopy()
	return &RequestPolicy{Default: &def, ValidValues: c.Values, Min: c.Min, Max: c.Max,
		Step: c.Step}, nil
}

func ptrs(qs []resource.Quantity) []*resource.Quantity {
	out := make([]*resource.Quantity, len(qs))
	for i := range qs {
		out[i] = &qs[i]
	}
	return out
}

// check runs the API server's request policy rules on p.
func (c ShareCapacity) check(p *RequestPolicy) error {
	var ch checker
	ch.requestPolicy(c.Capacity, p.api(),
		field.NewPath("capacity").Key(c.Name).Child("requestPolicy"))
	var errs []error
	for _, p := range ch.problems {
		errs = append(errs, fmt.Errorf("%s: %s", p.Field, p.Detail))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The API server takes a default above the capacity (with no Max)
	// that no device could give.
	if c.Default.Cmp(c.Capacity) > 0 {
		return fmt.Errorf("default %s is more than the capacity %s", &c.Default, &c.Capacity)
	}
	return nil
}

// Apply makes d shareable (allocatable to several claims at once,
// [Device.AllowMultipleAllocations]) with each capacity and its request
// policy, replacing same-named capacities, and returns d.
func (s *Shares) Apply(d *Device) *Device {
	d.AllowMultipleAllocations()
	for i, c := range s.caps {
		d.Capacity(c.Name, c.Capacity, s.policies[i])
	}
	return d
}

// Names returns the capacities' names in the order given to [NewShares].
func (s *Shares) Names() []string {
	out := make([]string, len(s.caps))
	for i, c := range s.caps {
		out[i] = c.Name
	}
	return out
}

// Capacity returns the device's total of capacity name; false when the
// model has no such capacity.
func (s *Shares) Capacity(name string) (resource.Quantity, bool) {
	for _, c := range s.caps {
		if c.Name == name {
			return c.Capacity.DeepCopy(), true
		}
	}
	return resource.Quantity{}, false
}

// Share is what one allocation took of each capacity of a [Shares]
// model, by capacity name.
type Share map[string]resource.Quantity

// Of returns the share an allocation took, from its consumed capacity
// (driver.AllocatedDevice.ConsumedCapacity): each capacity of the model
// at the amount consumed, the default where the allocation names none
// (an allocation of a scheduler without consumable capacity, or a
// record from before the amounts were kept). An amount that breaks the
// capacity's request policy, or exceeds the capacity, is an error: the
// allocation did not come from this model.
func (s *Shares) Of(consumed map[resourceapi.QualifiedName]resource.Quantity) (Share, error) {
	out := Share{}
	for i, c := range s.caps {
		q, ok := consumed[resourceapi.QualifiedName(c.Name)]
		if !ok {
			out[c.Name] = c.Default.DeepCopy()
			continue
		}
		if !allowed(q, c, s.policies[i]) {
			return nil, fmt.Errorf("%w: %s %s is not an amount the request policy allows",
				ErrInvalidShares, c.Name, &q)
		}
		out[c.Name] = q.DeepCopy()
	}
	return out, nil
}

// allowed says whether a share may have taken q of c.
func allowed(q resource.Quantity, c ShareCapacity, p *RequestPolicy) bool {
	if q.Cmp(c.Capacity) > 0 || q.Sign() < 0 {
		return false
	}
	if q.Cmp(*p.Default) == 0 {
		return true
	}
	if len(p.ValidValues) > 0 {
		return slices.ContainsFunc(p.ValidValues,
			func(v resource.Quantity) bool { return v.Cmp(q) == 0 })
	}
	if q.Cmp(*p.Min) < 0 || (p.Max != nil && q.Cmp(*p.Max) > 0) {
		return false
	}
	if p.Step == nil {
		return true
	}
	return (q.Value()-p.Min.Value())%p.Step.Value() == 0
}

// Percent is the amount of capacity name in sh as a percentage of the
// capacity, rounded down, at least 1 for a non-zero amount (a share is
// never nothing); 0 for a capacity the model lacks.
func (s *Shares) Percent(sh Share, name string) int {
	total, ok := s.Capacity(name)
	q, has := sh[name]
	if !ok || !has || total.Sign() == 0 || q.Sign() == 0 {
		return 0
	}
	p := int(q.Value() * 100 / total.Value())
	return max(p, 1)
}
