package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// TextOption configures WriteText.
type TextOption func(*textOptions)

type textOptions struct {
	nodes   int
	details int
}

// WithMaxNodes limits the table to the n most promising nodes (default
// 20; 0 for all). A last line counts the rest.
func WithMaxNodes(n int) TextOption { return func(o *textOptions) { o.nodes = n } }

// WithDetails sets for how many of the most promising nodes the details
// (closest devices, holders, counters, attribute groups) are written
// below the table (default 3).
func WithDetails(n int) TextOption { return func(o *textOptions) { o.details = n } }

// WriteText writes the report for a person: a headline, a table with one
// row per node and request (the most promising nodes first), then the
// details of the first nodes.
func (r *Report) WriteText(w io.Writer, opts ...TextOption) error {
	o := textOptions{nodes: 20, details: 3}
	for _, opt := range opts {
		opt(&o)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", r.Subject, r.headline())
	if len(r.Claims) > 0 {
		fmt.Fprintf(&b, "claims to allocate: %s\n", strings.Join(r.Claims, ", "))
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	b.WriteString("\n")
	shown := r.Nodes
	if o.nodes > 0 && len(shown) > o.nodes {
		shown = shown[:o.nodes]
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tFITS\tREQUEST\tWHY")
	for _, n := range shown {
		for i, row := range n.rows() {
			node, fits := n.Node, "no"
			if n.Fits {
				fits = "yes"
			}
			if i > 0 {
				node, fits = "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", node, fits, row[0], row[1])
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if rest := len(r.Nodes) - len(shown); rest > 0 {
		fmt.Fprintf(&b, "... and %d more nodes (%s)\n", rest, r.restSummary(len(shown)))
	}
	for i, n := range shown {
		if i >= o.details {
			break
		}
		if d := n.details(); d != "" {
			fmt.Fprintf(&b, "\n%s:\n%s", n.Node, d)
		}
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func (r *Report) headline() string {
	switch {
	case len(r.Nodes) == 0:
		return "no candidate nodes"
	case r.Fits:
		return fmt.Sprintf("%d of %d nodes can allocate its claims", r.NodesFit, len(r.Nodes))
	default:
		return fmt.Sprintf("no node can allocate its claims (%d nodes)", len(r.Nodes))
	}
}

// restSummary counts the kinds of the nodes left out of the table.
func (r *Report) restSummary(from int) string {
	count := map[string]int{}
	for _, n := range r.Nodes[from:] {
		k := "fits"
		if !n.Fits {
			k = string(firstKind(&n))
		}
		count[k]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, count[k])
	}
	return strings.Join(parts, ", ")
}

func firstKind(n *NodeReport) Kind {
	if len(n.Reasons) > 0 {
		return n.Reasons[0].Kind
	}
	for _, r := range n.Requests {
		if r.Fits {
			continue
		}
		if len(r.Reasons) > 0 {
			return r.Reasons[0].Kind
		}
		if len(r.Alternatives) > 0 && len(r.Alternatives[0].Reasons) > 0 {
			return r.Alternatives[0].Reasons[0].Kind
		}
	}
	return Unexplained
}

// rows returns the table rows of a node: [request, why].
func (n *NodeReport) rows() [][2]string {
	if n.Fits {
		if len(n.Allocation) == 0 {
			return [][2]string{{"-", "nothing left to allocate"}}
		}
		byReq := map[string][]string{}
		var order []string
		for _, d := range n.Allocation {
			k := shortClaim(d.Claim) + "/" + d.Request
			if byReq[k] == nil {
				order = append(order, k)
			}
			byReq[k] = append(byReq[k], d.Pool+"/"+d.Device)
		}
		var out [][2]string
		for _, k := range order {
			out = append(out, [2]string{k, "would get " + strings.Join(byReq[k], ", ")})
		}
		return out
	}
	var out [][2]string
	for _, r := range n.Reasons {
		who := "-"
		if r.Claim != "" {
			who = shortClaim(strings.Fields(r.Claim)[0])
		}
		out = append(out, [2]string{who, string(r.Kind) + ": " + r.Message})
	}
	for _, rr := range n.Requests {
		name := shortClaim(rr.Claim) + "/" + rr.Request
		switch {
		case rr.Fits && len(rr.Alternatives) == 0:
			out = append(out, [2]string{name, "fits on its own"})
		case len(rr.Alternatives) > 0:
			for _, alt := range rr.Alternatives {
				why := "fits on its own"
				if !alt.Fits {
					why = reasonLine(alt.Reasons)
				}
				out = append(out, [2]string{shortClaim(alt.Claim) + "/" + alt.Request, why})
			}
		default:
			out = append(out, [2]string{name, reasonLine(rr.Reasons)})
		}
	}
	return out
}

func reasonLine(rs []Reason) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = string(r.Kind) + ": " + r.Message
	}
	return strings.Join(parts, "; ")
}

// shortClaim drops the namespace of "NS/NAME".
func shortClaim(c string) string {
	if _, name, ok := strings.Cut(c, "/"); ok {
		return name
	}
	return c
}

// details returns the indented detail lines of a node's reasons.
func (n *NodeReport) details() string {
	var b strings.Builder
	for _, r := range n.Reasons {
		writeReasonDetails(&b, "  ", r)
	}
	var walk func(prefix string, rs []RequestReport)
	walk = func(prefix string, rs []RequestReport) {
		for _, rr := range rs {
			for _, r := range rr.Reasons {
				var sub strings.Builder
				writeReasonDetails(&sub, prefix+"  ", r)
				if sub.Len() > 0 {
					fmt.Fprintf(&b, "%s%s/%s, %s:\n%s", prefix, shortClaim(rr.Claim), rr.Request, r.Kind, sub.String())
				}
			}
			walk(prefix, rr.Alternatives)
		}
	}
	walk("  ", n.Requests)
	return b.String()
}

const maxListed = 6

func writeReasonDetails(b *strings.Builder, in string, r Reason) {
	if s := r.Selectors; s != nil {
		fmt.Fprintf(b, "%s%s selects with: %s\n", in, s.Source, strings.Join(s.Expressions, " && "))
		for _, d := range s.Closest {
			fmt.Fprintf(b, "%sclosest: %s (%d of %d terms true)\n", in, d.Device, d.True, d.True+len(d.False))
			for _, t := range d.False {
				fmt.Fprintf(b, "%s  false: %s", in, t.Term)
				if len(t.Values) > 0 {
					fmt.Fprintf(b, "   [%s]", formatValues(t.Values))
				}
				if t.Error != "" {
					fmt.Fprintf(b, "   (error: %s)", t.Error)
				}
				b.WriteString("\n")
			}
		}
	}
	for _, h := range limit(r.Holders) {
		writeHolder(b, in, h)
	}
	if len(r.Holders) > maxListed {
		fmt.Fprintf(b, "%s... and %d more claims\n", in, len(r.Holders)-maxListed)
	}
	sets := 0
	for i, c := range r.Counters {
		if i > 0 && c.CounterSet == r.Counters[i-1].CounterSet && c.Pool == r.Counters[i-1].Pool {
			fmt.Fprintf(b, "%s    %s: %s of %s left, needs %s\n", in, c.Counter, c.Left, c.Capacity, c.Need)
			continue
		}
		sets++
		if sets > maxListed {
			continue
		}
		fmt.Fprintf(b, "%scounter set %s/%s:\n", in, c.Pool, c.CounterSet)
		fmt.Fprintf(b, "%s    %s: %s of %s left, needs %s\n", in, c.Counter, c.Left, c.Capacity, c.Need)
		for _, h := range limit(counterHolders(r.Counters, c)) {
			writeHolder(b, in+"    ", h)
		}
	}
	if sets > maxListed {
		fmt.Fprintf(b, "%s... and %d more counter sets\n", in, sets-maxListed)
	}
	for _, t := range r.Taints {
		taint := t.Key
		if t.Value != "" {
			taint += "=" + t.Value
		}
		taint += ":" + t.Effect
		if t.Rule != "" {
			taint += " (DeviceTaintRule " + t.Rule + ")"
		}
		if len(t.Devices) > 0 {
			fmt.Fprintf(b, "%staint %s on %s\n", in, taint, list(t.Devices))
		}
	}
}

// counterHolders merges the holders of every counter of c's counter set.
func counterHolders(all []CounterReport, c CounterReport) []Holder {
	by := map[string]*Holder{}
	var order []string
	for _, o := range all {
		if o.Pool != c.Pool || o.CounterSet != c.CounterSet {
			continue
		}
		for _, h := range o.Holders {
			if by[h.Claim] == nil {
				hc := h
				hc.Devices = nil
				by[h.Claim] = &hc
				order = append(order, h.Claim)
			}
			for _, d := range h.Devices {
				if !contains(by[h.Claim].Devices, d) {
					by[h.Claim].Devices = append(by[h.Claim].Devices, d)
				}
			}
		}
	}
	sort.Strings(order)
	out := make([]Holder, len(order))
	for i, k := range order {
		out[i] = *by[k]
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func writeHolder(b *strings.Builder, in string, h Holder) {
	fmt.Fprintf(b, "%sclaim %s", in, h.Claim)
	if len(h.Pods) > 0 {
		fmt.Fprintf(b, " (pod %s)", strings.Join(h.Pods, ", "))
	}
	fmt.Fprintf(b, " holds %s\n", list(h.Devices))
}

func limit(hs []Holder) []Holder {
	if len(hs) > maxListed {
		return hs[:maxListed]
	}
	return hs
}

func list(xs []string) string {
	if len(xs) > maxListed {
		return fmt.Sprintf("%s and %d more", strings.Join(xs[:maxListed], ", "), len(xs)-maxListed)
	}
	return strings.Join(xs, ", ")
}

func formatValues(v map[string]string) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + v[k]
	}
	return strings.Join(parts, ", ")
}
