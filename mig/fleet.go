package mig

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// FleetGPU is one GPU of a fleet as the planner sees it.
//
// In JSON (and YAML through sigs.k8s.io/yaml) "product" is either a name
// that Lookup resolves ("H100-80GB", "NVIDIA A100-SXM4-40GB") or a whole
// product object as Product marshals it (name, memorySlices,
// computeSlices, profiles), which NewProduct then checks: a product built
// by FromNVML round-trips as an object, a catalog product as its name.
type FleetGPU struct {
	// Node is the node the GPU is on.
	Node string `json:"node"`
	// Index is the GPU's index on its node.
	Index int `json:"index"`
	// Product is the GPU's product: from Lookup or Products for the
	// built-in table, or from FromNVML (or NewProduct) for what a real GPU
	// reports. It must not be nil.
	Product *Product `json:"product"`
	// Layout is the GPU's current instances; InUse ones are never touched.
	Layout Layout `json:"layout,omitempty"`
}

// fleetGPUJSON is FleetGPU's wire form.
type fleetGPUJSON struct {
	Node    string          `json:"node"`
	Index   int             `json:"index"`
	Product json.RawMessage `json:"product"`
	Layout  Layout          `json:"layout,omitempty"`
}

// productJSON is the part of Product's wire form that NewProduct takes.
type productJSON struct {
	Name          string    `json:"name"`
	MemorySlices  int       `json:"memorySlices"`
	ComputeSlices int       `json:"computeSlices"`
	Profiles      []Profile `json:"profiles"`
}

// MarshalJSON writes the product as its name when it is the catalog's
// entry of that name, else as the whole product.
func (f FleetGPU) MarshalJSON() ([]byte, error) {
	var prod any = f.Product
	if f.Product != nil && byName(f.Product.Name) == f.Product {
		prod = f.Product.Name
	}
	b, err := json.Marshal(prod)
	if err != nil {
		return nil, fmt.Errorf("marshal fleet GPU %s/%d: %w", f.Node, f.Index, err)
	}
	return json.Marshal(fleetGPUJSON{Node: f.Node, Index: f.Index, Product: b, Layout: f.Layout})
}

// UnmarshalJSON reads a fleet GPU; unknown fields are an error, and the
// product must resolve (see FleetGPU).
func (f *FleetGPU) UnmarshalJSON(b []byte) error {
	var w fleetGPUJSON
	if err := strictJSON(b, &w); err != nil {
		return fmt.Errorf("decode fleet GPU: %w", err)
	}
	raw := bytes.TrimSpace(w.Product)
	var p *Product
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return fmt.Errorf("decode fleet GPU %s/%d: product is missing", w.Node, w.Index)
	case raw[0] == '"':
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return fmt.Errorf("decode fleet GPU %s/%d: product: %w", w.Node, w.Index, err)
		}
		lp, err := Lookup(name)
		if err != nil {
			return fmt.Errorf("decode fleet GPU %s/%d: product: %w", w.Node, w.Index, err)
		}
		p = lp
	default:
		var pj productJSON
		if err := strictJSON(raw, &pj); err != nil {
			return fmt.Errorf("decode fleet GPU %s/%d: product: %w", w.Node, w.Index, err)
		}
		np, err := NewProduct(pj.Name, pj.MemorySlices, pj.ComputeSlices, pj.Profiles)
		if err != nil {
			return fmt.Errorf("decode fleet GPU %s/%d: product: %w", w.Node, w.Index, err)
		}
		p = np
	}
	*f = FleetGPU{Node: w.Node, Index: w.Index, Product: p, Layout: w.Layout}
	return nil
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
