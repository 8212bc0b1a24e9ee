//go:build ignore

// testtimes reads `go test -json` output (files or stdin) and prints where
// the time went: every package with its wall time and when it started and
// ended (seconds after the first event), then the slowest tests.
//
//	go run hack/testtimes.go [-top 30] [-sort start] test.json...
//
// With -follow FILE it reads stdin as `go test -json` writes it, copies
// every line to FILE and prints what plain `go test` would (a line per
// package; a failed package's whole output; build errors), then the
// times. hack/test.sh runs it so.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

type pkg struct {
	name         string
	start, end   time.Time
	elapsed      float64
	result       string
	tests        int
	skippedTests int
}

type test struct {
	pkg, name string
	elapsed   float64
	result    string
}

func main() {
	top := flag.Int("top", 30, "how many of the slowest tests to list")
	by := flag.String("sort", "elapsed", "package order: elapsed, start or name")
	follow := flag.String("follow", "", "copy stdin to this file and print plain go test output")
	flag.Parse()
	var copyTo *os.File
	if *follow != "" {
		f, err := os.Create(*follow)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		defer f.Close()
		copyTo = f
	}
	outputs := map[string][]string{} // -follow: a running package's output
	pkgs := map[string]*pkg{}
	var tests []test
	var first, last time.Time
	read := func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if copyTo != nil {
				_, _ = copyTo.Write(append(line, '\n'))
			}
			var e event
			if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
				if copyTo != nil {
					fmt.Printf("%s\n", line) // another tool's line
				}
				continue
			}
			if copyTo != nil {
				followEvent(e, outputs)
			}
			if e.Package == "" {
				continue
			}
			if first.IsZero() || e.Time.Before(first) {
				first = e.Time
			}
			if e.Time.After(last) {
				last = e.Time
			}
			p := pkgs[e.Package]
			if p == nil {
				p = &pkg{name: e.Package, start: e.Time}
				pkgs[e.Package] = p
			}
			switch {
			case e.Action == "start":
				p.start = e.Time
			case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
				p.end, p.elapsed, p.result = e.Time, e.Elapsed, e.Action
			case e.Test != "" && !strings.Contains(e.Test, "/") &&
				(e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
				p.tests++
				if e.Action == "skip" {
					p.skippedTests++
				}
				tests = append(tests, test{e.Package, e.Test, e.Elapsed, e.Action})
			}
		}
		return sc.Err()
	}
	if flag.NArg() == 0 || copyTo != nil {
		if err := read(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
	}
	for _, f := range flag.Args() {
		if copyTo != nil {
			break
		}
		fh, err := os.Open(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		err = read(fh)
		fh.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtimes: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
	var list []*pkg
	for _, p := range pkgs {
		if p.tests > 0 || p.result == "fail" {
			list = append(list, p)
		}
	}
	sort.Slice(list, func(i, j int) bool {
		switch *by {
		case "start":
			return list[i].start.Before(list[j].start)
		case "name":
			return list[i].name < list[j].name
		}
		return list[i].elapsed > list[j].elapsed
	})
	var sum float64
	fmt.Printf("%8s %7s %7s %5s %5s  %s\n", "seconds", "start", "end", "tests", "skip", "package")
	for _, p := range list {
		sum += p.elapsed
		res := ""
		if p.result != "pass" {
			res = " " + strings.ToUpper(p.result)
			if p.result == "" {
				res = " UNFINISHED"
			}
		}
		fmt.Printf("%8.1f %7.0f %7.0f %5d %5d  %s%s\n", p.elapsed, p.start.Sub(first).Seconds(),
			p.end.Sub(first).Seconds(), p.tests, p.skippedTests,
			strings.TrimPrefix(p.name, "github.com/drakit/drakit/"), res)
	}
	fmt.Printf("%8.1f package seconds in all, %.0f s from first to last event\n\n", sum,
		last.Sub(first).Seconds())
	sort.Slice(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	if *top > len(tests) {
		*top = len(tests)
	}
	fmt.Printf("the %d slowest tests:\n", *top)
	for _, t := range tests[:*top] {
		res := ""
		if t.result != "pass" {
			res = " " + strings.ToUpper(t.result)
		}
		fmt.Printf("%8.1f  %s %s%s\n", t.elapsed, strings.TrimPrefix(t.pkg, "github.com/drakit/drakit/"),
			t.name, res)
	}
}

// followEvent prints what plain go test prints for e: build errors at
// once, a package's result line when it ends, and its whole output if it
// failed.
func followEvent(e event, outputs map[string][]string) {
	switch {
	case e.Action == "build-output":
		fmt.Print(e.Output)
	case e.Package == "":
	case e.Action == "output":
		outputs[e.Package] = append(outputs[e.Package], e.Output)
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		out := outputs[e.Package]
		delete(outputs, e.Package)
		if e.Action == "fail" {
			fmt.Print(strings.Join(out, ""))
			return
		}
		if n := len(out); n > 0 {
			fmt.Print(out[n-1]) // "ok  \tpkg\t12.3s" or "?   \tpkg\t[no test files]"
		}
	}
}
