package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/drakit/drakit/topology"
)

func init() {
	register(command{
		name:    "topology",
		summary: "standard topology labels for nodes, the key table, aligned claims",
		run:     runTopology,
	})
}

const topologyUsage = `Usage: drakit topology SUBCOMMAND [flags]

Subcommands:
  labels   compute the standard topology labels of nodes and (with --apply) write them
  keys     print the standard key hierarchy and the cloud/vendor mapping table
  claim    print a ResourceClaim (or template) asking for devices aligned on one PCIe root or NUMA node

Run "drakit topology SUBCOMMAND -h" for its flags.`

func runTopology(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, topologyUsage)
		return fmt.Errorf("%w: missing subcommand", errUsage)
	}
	switch args[0] {
	case "labels":
		return runTopologyLabels(ctx, args[1:], stdout, stderr)
	case "keys":
		return runTopologyKeys(args[1:], stdout, stderr)
	case "claim":
		return runTopologyClaim(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, topologyUsage)
		return flag.ErrHelp
	default:
		fmt.Fprintln(stderr, topologyUsage)
		return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
	}
}

// listFlag collects repeated string flags.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// nodeAPI is what "topology labels" needs from the API server.
type nodeAPI interface {
	topology.NodeClient
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
}

// newNodeAPI builds the node client from a kubeconfig (explicit path, else
// $KUBECONFIG, else ~/.kube/config).
var newNodeAPI = func(kubeconfig string) (nodeAPI, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return cs.CoreV1().Nodes(), nil
}

// nodeResult is one node's outcome in JSON output.
type nodeResult struct {
	Node      string              `json:"node"`
	Changes   []topology.Change   `json:"changes"`
	Conflicts []topology.Conflict `json:"conflicts"`
	Owned     []string            `json:"owned"`
}

func runTopologyLabels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology labels", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sets, maps listFlag
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	all := fs.Bool("all", false, "label every node")
	selector := fs.String("l", "", "label the nodes matching this label selector")
	apply := fs.Bool("apply", false, "write the labels; without it the API server only validates them (dry run)")
	fromLabels := fs.String("from-labels", "", "offline: compute from these labels (k=v,k=v) instead of a cluster")
	noBuiltin := fs.Bool("no-builtin", false, "do not use the built-in cloud/vendor mapping table")
	output := fs.String("o", "text", "output format: text or json")
	fs.Var(&sets, "set", "a fact LEVEL=VALUE the sources cannot tell, e.g. interconnect-domain=nvl-3 (repeatable)")
	fs.Var(&maps, "map", "an own mapping LABEL=LEVEL that wins over the built-in table, e.g. example.com/rack=rack (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: drakit topology labels [flags] [NODE...]\n\nComputes the standard topology labels (see \"drakit topology keys\") of the\nnodes and prints the changes. Labels drakit did not write are never changed.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("%w: -o %q: want text or json", errUsage, *output)
	}
	var opts []topology.LabelOption
	for _, s := range sets {
		level, value, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("%w: --set %q: want LEVEL=VALUE", errUsage, s)
		}
		opts = append(opts, topology.WithFact(topology.Level(level), value))
	}
	for _, m := range maps {
		label, level, ok := strings.Cut(m, "=")
		if !ok {
			return fmt.Errorf("%w: --map %q: want LABEL=LEVEL", errUsage, m)
		}
		opts = append(opts, topology.WithMapping(topology.Mapping{From: label, Level: topology.Level(level), Source: "--map"}))
	}
	if *noBuiltin {
		opts = append(opts, topology.WithoutBuiltinMappings())
	}
	l, err := topology.NewLabeler(opts...)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	var results []nodeResult
	if *fromLabels != "" {
		if *apply || *all || *selector != "" || fs.NArg() > 0 {
			return fmt.Errorf("%w: --from-labels works offline; it takes no nodes, --all, -l or --apply", errUsage)
		}
		labels, err := parseLabels(*fromLabels)
		if err != nil {
			return fmt.Errorf("%w: --from-labels: %v", errUsage, err)
		}
		p := l.Plan(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "(labels)", Labels: labels}})
		results = append(results, nodeResult{Node: "(labels)", Changes: p.Changes, Conflicts: p.Conflicts, Owned: p.Owned})
	} else {
		if (fs.NArg() > 0) == (*all || *selector != "") || (*all && *selector != "") {
			return fmt.Errorf("%w: name nodes, or give --all or -l (one of the three)", errUsage)
		}
		api, err := newNodeAPI(*kubeconfig)
		if err != nil {
			return err
		}
		names := fs.Args()
		if *all || *selector != "" {
			list, err := api.List(ctx, metav1.ListOptions{LabelSelector: *selector})
			if err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			for _, n := range list.Items {
				names = append(names, n.Name)
			}
			sort.Strings(names)
		}
		for _, name := range names {
			p, err := l.LabelNode(ctx, api, name, !*apply)
			if err != nil {
				return err
			}
			results = append(results, nodeResult{Node: name, Changes: p.Changes, Conflicts: p.Conflicts, Owned: p.Owned})
		}
	}

	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	for _, r := range results {
		fmt.Fprintf(stdout, "node %s:\n", r.Node)
		if len(r.Changes) == 0 && len(r.Conflicts) == 0 {
			fmt.Fprintln(stdout, "  up to date")
		}
		for _, c := range r.Changes {
			switch c.Op {
			case topology.OpAdd:
				fmt.Fprintf(stdout, "  + %s=%s (from %s)\n", c.Key, c.New, c.From)
			case topology.OpUpdate:
				fmt.Fprintf(stdout, "  ~ %s=%s, was %s (from %s)\n", c.Key, c.New, c.Old, c.From)
			case topology.OpRemove:
				fmt.Fprintf(stdout, "  - %s, was %s (no source left)\n", c.Key, c.Old)
			}
		}
		for _, c := range r.Conflicts {
			fmt.Fprintf(stdout, "  ! %s=%s kept: not written by drakit; %s says %s\n", c.Key, c.Existing, c.From, c.Wanted)
		}
	}
	if *fromLabels == "" && !*apply {
		fmt.Fprintln(stdout, "dry run: nothing written; run with --apply to write the labels")
	}
	return nil
}

func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

func runTopologyKeys(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: keys takes no arguments", errUsage)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LEVEL\tLABEL\tNODES WITH ONE VALUE SHARE")
	for _, k := range topology.Hierarchy() {
		fmt.Fprintf(w, "%s\t%s\t%s\n", k.Level, k.Label, k.Meaning)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	w = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SOURCE LABEL\tLEVEL\tSET BY")
	for _, m := range topology.Mappings() {
		src := m.Source
		if m.Note != "" {
			src += ": " + m.Note
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", m.From, m.Level, src)
	}
	return w.Flush()
}

func runTopologyClaim(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology claim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var requests, pcie, numa listFlag
	name := fs.String("name", "aligned", "object name")
	namespace := fs.String("namespace", "default", "object namespace")
	template := fs.Bool("template", false, "print a ResourceClaimTemplate instead of a ResourceClaim")
	fs.Var(&requests, "request", "a request NAME=DEVICECLASS[:COUNT] (repeatable)")
	fs.Var(&pcie, "same-pcie-root", "comma-separated requests whose devices share a PCIe root; empty means all (repeatable)")
	fs.Var(&numa, "same-numa-node", "comma-separated requests whose devices share a NUMA node; empty means all (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: drakit topology claim --request gpu=gpu.example.com --request nic=nic.example.com --same-pcie-root gpu,nic\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var reqs []topology.Request
	for _, r := range requests {
		n, class, ok := strings.Cut(r, "=")
		if !ok {
			return fmt.Errorf("%w: --request %q: want NAME=DEVICECLASS[:COUNT]", errUsage, r)
		}
		req := topology.Request{Name: n, DeviceClassName: class}
		if c, count, ok := strings.Cut(class, ":"); ok {
			v, err := strconv.ParseInt(count, 10, 64)
			if err != nil || v < 1 {
				return fmt.Errorf("%w: --request %q: count %q is not a positive integer", errUsage, r, count)
			}
			req.DeviceClassName, req.Count = c, v
		}
		reqs = append(reqs, req)
	}
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	var cons []resourceapi.DeviceConstraint
	for _, p := range pcie {
		cons = append(cons, topology.SamePCIeRoot(split(p)...))
	}
	for _, p := range numa {
		cons = append(cons, topology.SameNUMANode(split(p)...))
	}
	spec, err := topology.ClaimSpec(reqs, cons...)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var obj any = topology.Claim(*namespace, *name, spec)
	if *template {
		obj = topology.ClaimTemplate(*namespace, *name, spec)
	}
	out, err := topology.YAML(obj)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}
