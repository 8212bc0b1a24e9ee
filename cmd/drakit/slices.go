package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/device"
)

func init() {
	register(command{
		name:    "slices",
		summary: "validate ResourceSlice YAML against the API rules (slices validate FILE...)",
		run:     runSlices,
	})
}

func runSlices(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("slices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: drakit slices validate FILE... (- for stdin)")
		fmt.Fprintln(stderr, "\nValidates resource.k8s.io/v1 ResourceSlices (YAML or JSON; several")
		fmt.Fprintln(stderr, "documents separated by ---, or a List) by the rules of the 1.37 API")
		fmt.Fprintln(stderr, "server, and the slices of each pool against each other. Exits 1 when")
		fmt.Fprintln(stderr, "any problem is found.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 || fs.Arg(0) != "validate" {
		fs.Usage()
		return fmt.Errorf("%w: want \"slices validate FILE...\"", errUsage)
	}
	var all []*resourceapi.ResourceSlice
	var origin []string
	for _, file := range fs.Args()[1:] {
		data, err := readInput(file)
		if err != nil {
			return err
		}
		ss, err := decodeSlices(data)
		if err != nil {
			return fmt.Errorf("decode %s: %w", file, err)
		}
		for i, s := range ss {
			all = append(all, s)
			origin = append(origin, fmt.Sprintf("%s#%d (%s)", file, i, s.Name))
		}
	}
	err := device.Validate(all...)
	if err == nil {
		fmt.Fprintf(stdout, "%d slices valid\n", len(all))
		return nil
	}
	var ve *device.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	for _, p := range ve.Problems {
		where := ""
		if p.Slice >= 0 && p.Slice < len(origin) {
			where = origin[p.Slice] + ": "
		}
		p.Slice = -1
		fmt.Fprintf(stdout, "%s%s [%s]\n", where, p.String(), p.Scope)
	}
	return fmt.Errorf("%d problems in %d slices", len(ve.Problems), len(all))
}

func readInput(file string) ([]byte, error) {
	if file == "-" {
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read slices: %w", err)
	}
	return data, nil
}

// decodeSlices reads YAML or JSON documents, each a ResourceSlice or a
// List of them. Unknown fields are errors (they would be dropped).
func decodeSlices(data []byte) ([]*resourceapi.ResourceSlice, error) {
	var out []*resourceapi.ResourceSlice
	for i, doc := range splitYAML(data) {
		var head struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		switch {
		case strings.HasSuffix(head.Kind, "List"):
			for j, item := range head.Items {
				s := &resourceapi.ResourceSlice{}
				if err := yaml.UnmarshalStrict(item, s); err != nil {
					return nil, fmt.Errorf("document %d item %d: %w", i, j, err)
				}
				out = append(out, s)
			}
		case head.Kind == "ResourceSlice" || head.Kind == "":
			s := &resourceapi.ResourceSlice{}
			if err := yaml.UnmarshalStrict(doc, s); err != nil {
				return nil, fmt.Errorf("document %d: %w", i, err)
			}
			out = append(out, s)
		default:
			return nil, fmt.Errorf("document %d: kind %q is not a ResourceSlice", i, head.Kind)
		}
	}
	return out, nil
}

// splitYAML splits a stream at "---" lines, dropping empty documents.
func splitYAML(data []byte) [][]byte {
	var out [][]byte
	for _, doc := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) > 0 {
			out = append(out, doc)
		}
	}
	return out
}
