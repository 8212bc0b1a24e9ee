package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/explain"
)

func init() {
	register(command{
		name:    "explain",
		summary: "why a pod's device claims cannot be allocated, node by node (explain pod NAME; -f FILE for a what-if)",
		run:     runExplain,
	})
}

// errNothingFits makes "drakit explain" exit 1 when a subject fits on no
// node, after the report is written.
var errNothingFits = errors.New("no node can allocate the claims")

type repeated []string

func (r *repeated) String() string     { return fmt.Sprint(*r) }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage:
  drakit explain [flags] pod|claim|template NAME   a pending object in the cluster
  drakit explain [flags] -f FILE...                 what-if: the pods, claims and templates in FILE
  drakit explain [flags] snapshot                   write the cluster's nodes, slices, classes, claims,
                                                    templates and taint rules as YAML (for --snapshot)

For every candidate node, most promising first, says which devices the
scheduler's allocator would pick or why the claims cannot be allocated:
node selector or affinity, node taint, no device of the class, a selector
false for every device (with the closest devices' values), too many
devices, all matching devices allocated (to which claims and pods), a
shared counter used up, a matchAttribute constraint, a device taint,
firstAvailable alternatives one by one. Objects come from the cluster
(--kubeconfig, $KUBECONFIG) or, with --snapshot, from saved YAML.
Exits 1 when some object fits on no node.

Flags:`)
		fs.PrintDefaults()
	}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG, then ~/.kube/config)")
	namespace := fs.String("n", metav1.NamespaceDefault, "namespace of the pod, claim or template")
	output := fs.String("o", "table", "output format: table or json")
	maxNodes := fs.Int("nodes", 20, "table: show the N most promising nodes (0: all)")
	details := fs.Int("details", 3, "table: write the details of the N most promising nodes")
	var files, snapshots, nodes repeated
	fs.Var(&nodes, "node", "explain only this node (repeatable; default: every node)")
	fs.Var(&files, "f", "YAML file with pods, claims or templates to explain (repeatable)")
	fs.Var(&snapshots, "snapshot", "YAML file with the cluster state (nodes, ResourceSlices, DeviceClasses, claims); repeatable; replaces the live cluster")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("%w: -o %q: want table or json", errUsage, *output)
	}
	rest := fs.Args()
	switch {
	case len(rest) == 1 && rest[0] == "snapshot" && len(files) == 0:
	case len(rest) == 2 && len(files) == 0 && (rest[0] == "pod" || rest[0] == "claim" || rest[0] == "template"):
	case len(rest) == 0 && len(files) > 0:
	default:
		fs.Usage()
		return fmt.Errorf("%w: want \"pod|claim|template NAME\", \"-f FILE\" or \"snapshot\"", errUsage)
	}

	var client kubernetes.Interface
	if len(snapshots) > 0 && len(rest) > 0 {
		return fmt.Errorf("%w: --snapshot works with -f; objects by name come from the cluster", errUsage)
	}
	if len(snapshots) == 0 {
		c, err := kubeClient(*kubeconfig)
		if err != nil {
			return err
		}
		client = c
	}
	var snap *explain.Snapshot
	var err error
	if len(snapshots) > 0 {
		snap, err = explain.Load(snapshots...)
	} else {
		snap, err = explain.FromCluster(ctx, client)
	}
	if err != nil {
		return err
	}
	if len(rest) == 1 {
		return writeSnapshot(stdout, snap)
	}

	var opts []explain.Option
	if len(nodes) > 0 {
		opts = append(opts, explain.WithNodes(nodes...))
	}
	var reports []*explain.Report
	if len(rest) == 2 {
		rep, err := explainLive(ctx, client, snap, rest[0], rest[1], *namespace, opts)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	} else {
		subjects, err := explain.Load(files...)
		if err != nil {
			return err
		}
		// The files' claims and templates are visible to their pods. With
		// pods in the files, the pods are explained; else the claims and
		// templates.
		snap.Templates = append(snap.Templates, subjects.Templates...)
		snap.Claims = append(snap.Claims, subjects.Claims...)
		for _, p := range subjects.Pods {
			rep, err := explain.Pod(ctx, snap, p, opts...)
			if err != nil {
				return err
			}
			reports = append(reports, rep)
		}
		if len(subjects.Pods) == 0 {
			for _, c := range subjects.Claims {
				rep, err := explain.Claim(ctx, snap, c, opts...)
				if err != nil {
					return err
				}
				reports = append(reports, rep)
			}
			for _, t := range subjects.Templates {
				rep, err := explain.Template(ctx, snap, t, opts...)
				if err != nil {
					return err
				}
				reports = append(reports, rep)
			}
		}
		if len(reports) == 0 {
			return fmt.Errorf("%w: %v holds no pod, claim or template", errUsage, []string(files))
		}
	}
	fits := true
	for i, rep := range reports {
		if *output == "json" {
			err = rep.WriteJSON(stdout)
		} else {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			err = rep.WriteText(stdout, explain.WithMaxNodes(*maxNodes), explain.WithDetails(*details))
		}
		if err != nil {
			return err
		}
		fits = fits && rep.Fits
	}
	if !fits {
		return errNothingFits
	}
	return nil
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return client, nil
}

func explainLive(ctx context.Context, client kubernetes.Interface, snap *explain.Snapshot, kind, name, ns string, opts []explain.Option) (*explain.Report, error) {
	switch kind {
	case "pod":
		pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get pod: %w", err)
		}
		return explain.Pod(ctx, snap, pod, opts...)
	case "claim":
		claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get claim: %w", err)
		}
		return explain.Claim(ctx, snap, claim, opts...)
	default:
		tmpl, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get claim template: %w", err)
		}
		return explain.Template(ctx, snap, tmpl, opts...)
	}
}

// writeSnapshot writes the snapshot as one YAML List that --snapshot
// reads back.
func writeSnapshot(w io.Writer, s *explain.Snapshot) error {
	var items []runtime.Object
	add := func(o runtime.Object, meta *metav1.ObjectMeta, kind, version string) {
		o.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(version, kind))
		meta.ManagedFields = nil
		items = append(items, o)
	}
	for _, o := range s.Nodes {
		add(o, &o.ObjectMeta, "Node", "v1")
	}
	for _, o := range s.Classes {
		add(o, &o.ObjectMeta, "DeviceClass", resourceapi.SchemeGroupVersion.String())
	}
	for _, o := range s.Slices {
		add(o, &o.ObjectMeta, "ResourceSlice", resourceapi.SchemeGroupVersion.String())
	}
	for _, o := range s.Claims {
		add(o, &o.ObjectMeta, "ResourceClaim", resourceapi.SchemeGroupVersion.String())
	}
	for _, o := range s.Templates {
		add(o, &o.ObjectMeta, "ResourceClaimTemplate", resourceapi.SchemeGroupVersion.String())
	}
	for _, o := range s.TaintRules {
		add(o, &o.ObjectMeta, "DeviceTaintRule", resourceapi.SchemeGroupVersion.String())
	}
	data, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	_, err = w.Write(data)
	return err
}
