package engine

// FleetCard is one card of a fleet as the planner sees it.
type FleetCard struct {
	// Node is the node the card is on.
	Node string `json:"node"`
	// Index is the card's index on its node.
	Index int `json:"index"`
	// Scheme is the card's partition scheme, built by NewScheme. It must
	// not be nil. JSON leaves it out: a vendor's fleet format names its
	// card models its own way.
	Scheme *Scheme `json:"-"`
	// Layout is the card's current partitions; in-use ones are never
	// touched.
	Layout Layout `json:"layout,omitempty"`
}
